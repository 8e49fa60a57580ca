//go:build !linux

package process

func unprivilegedPortStart() int { return 0 }
