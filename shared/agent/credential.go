package agent

import (
	"fmt"
	"os"
	"strings"
)

// ReadCredentialFile reads a node credential from a file only its owner can
// read or write (mode 0600 or 0400). A credential in the agent's arguments
// would be in every user's process list, and one in its environment is
// readable through /proc by whatever runs as its user.
func ReadCredentialFile(path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", fmt.Errorf("credential file: %w", err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return "", fmt.Errorf("credential file: %w", err)
	}
	if !st.Mode().IsRegular() {
		return "", fmt.Errorf("credential file %s is not a regular file", path)
	}
	if perm := st.Mode().Perm(); perm&0o077 != 0 {
		return "", fmt.Errorf("credential file %s has mode %04o: group or others may read or change it; make it the agent's alone (chmod 600 %s)", path, perm, path)
	}
	b := make([]byte, 4096)
	n, err := f.Read(b)
	if err != nil && n == 0 {
		return "", fmt.Errorf("credential file %s: %w", path, err)
	}
	tok := strings.TrimSpace(string(b[:n]))
	if tok == "" || strings.ContainsAny(tok, " \t\r\n") {
		return "", fmt.Errorf("credential file %s must hold one node credential (els_node_…) and nothing else", path)
	}
	return tok, nil
}
