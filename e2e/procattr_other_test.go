//go:build !linux

package e2e

import "os/exec"

// setProcAttr does nothing where the kernel offers no parent-death signal: the processes are
// still stopped by t.Cleanup, just not when the test binary itself is killed.
func setProcAttr(*exec.Cmd) {}
