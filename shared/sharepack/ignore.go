package sharepack

import (
	"bufio"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/go-git/go-git/v5/plumbing/format/gitignore"
)

// ignores are the patterns of the ignore files read so far, in the order
// git gives them precedence: a folder's after its parent's, and
// .envleaseignore after .gitignore, so a later pattern wins.
type ignores struct {
	patterns []gitignore.Pattern
	matcher  gitignore.Matcher
}

// read adds the patterns of the ignore files of folder dir, whose path
// below the shared folder is domain (nil for the folder itself).
func (ig *ignores) read(dir string, domain []string) error {
	added := false
	for _, name := range []string{".gitignore", IgnoreFile} {
		lines, err := readLines(filepath.Join(dir, name))
		if err != nil {
			return err
		}
		for _, l := range lines {
			ig.patterns = append(ig.patterns, gitignore.ParsePattern(l, domain))
			added = true
		}
	}
	if added {
		ig.matcher = gitignore.NewMatcher(ig.patterns)
	}
	return nil
}

// match reports whether the slash-separated path rel is ignored.
func (ig *ignores) match(rel string, isDir bool) bool {
	parts := strings.Split(rel, "/")
	// A repository's own files are never a share's: every folder's .git
	// (a submodule's, a worktree's file too), not only the top one's.
	if parts[len(parts)-1] == ".git" {
		return true
	}
	return ig.matcher != nil && ig.matcher.Match(parts, isDir)
}

// readLines are the pattern lines of an ignore file: not blank, not a
// comment. A missing file has none.
func readLines(path string) ([]string, error) {
	f, err := os.Open(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var out []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		l := strings.TrimRight(sc.Text(), "\r")
		if strings.TrimSpace(l) == "" || strings.HasPrefix(l, "#") {
			continue
		}
		out = append(out, l)
	}
	return out, sc.Err()
}
