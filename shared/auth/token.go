// Package auth issues bearer tokens and authenticates requests: tokens are
// found by their SHA-256, and failed attempts are counted per peer address.
package auth

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"strings"
)

// Token prefixes make a leaked token recognisable (and scannable) by kind.
const (
	PrefixCLI  = "els_cli_"
	PrefixOrg  = "els_org_"
	PrefixNode = "els_node_"
)

// prefixLen is how many leading characters of a token its record keeps.
const prefixLen = 12

const alphabet = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"

// NewToken returns a fresh token: kind prefix + 43 base62 characters
// (256 bits of randomness), with its display prefix and hash.
func NewToken(kindPrefix string) (token, prefix, hash string) {
	token = kindPrefix + randomString(43)
	return token, DisplayPrefix(token), HashToken(token)
}

// NewID returns a random identifier with a readable prefix, e.g. "key_...".
func NewID(prefix string) string { return prefix + strings.ToLower(randomString(20)) }

// randomString draws n characters uniformly from alphabet (rejection sampling,
// so no character is more likely than another).
func randomString(n int) string {
	var b strings.Builder
	buf := make([]byte, 1)
	for b.Len() < n {
		if _, err := rand.Read(buf); err != nil {
			panic("crypto/rand failed: " + err.Error()) // the OS has no entropy: nothing safe to do
		}
		if int(buf[0]) >= 256-(256%len(alphabet)) {
			continue
		}
		b.WriteByte(alphabet[int(buf[0])%len(alphabet)])
	}
	return b.String()
}

// HashToken is what the store keeps instead of the token.
func HashToken(token string) string {
	sum := sha256.Sum256([]byte(token))
	return hex.EncodeToString(sum[:])
}

// DisplayPrefix is the part of a token shown in listings.
func DisplayPrefix(token string) string {
	if len(token) <= prefixLen {
		return token
	}
	return token[:prefixLen]
}

// ParseBearer extracts the token from an Authorization header value. It
// accepts exactly "Bearer <token>" with a printable token of sane length.
func ParseBearer(header string) (string, bool) {
	const scheme = "Bearer "
	if len(header) < len(scheme) || !strings.EqualFold(header[:len(scheme)], scheme) {
		return "", false
	}
	tok := header[len(scheme):]
	if len(tok) < 16 || len(tok) > 256 {
		return "", false
	}
	for i := 0; i < len(tok); i++ {
		c := tok[i]
		if c <= ' ' || c >= 0x7f {
			return "", false
		}
	}
	return tok, true
}
