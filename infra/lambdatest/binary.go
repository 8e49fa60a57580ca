package lambdatest

import (
	"debug/elf"
	"fmt"
	"os"
)

var elfMachines = map[string]elf.Machine{"arm64": elf.EM_AARCH64, "amd64": elf.EM_X86_64}

// CheckBootstrap checks that path is an executable Linux ELF binary for
// goarch, statically linked as the provided runtimes need (no interpreter
// of the build machine's).
func CheckBootstrap(path, goarch string) error {
	st, err := os.Stat(path)
	if err != nil {
		return fmt.Errorf("no bootstrap: %w", err)
	}
	if st.Mode()&0o111 == 0 {
		return fmt.Errorf("%s is not executable (%s)", path, st.Mode())
	}
	f, err := elf.Open(path)
	if err != nil {
		return fmt.Errorf("%s: not an ELF binary: %w", path, err)
	}
	defer f.Close()
	if want := elfMachines[goarch]; f.Machine != want {
		return fmt.Errorf("%s is for %s, not %s", path, f.Machine, goarch)
	}
	if f.Type != elf.ET_EXEC && f.Type != elf.ET_DYN {
		return fmt.Errorf("%s is %s, not an executable", path, f.Type)
	}
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			return fmt.Errorf("%s is dynamically linked", path)
		}
	}
	return nil
}
