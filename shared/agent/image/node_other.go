//go:build !linux

package image

import (
	"archive/tar"
	"errors"
	"os"
)

func mknodAt(*os.File, string, *tar.Header) error {
	return errors.New("device files and fifos are only created on Linux")
}
