package e2e

import (
	"os/exec"
	"syscall"
)

// setProcAttr has the kernel kill a started process when the test binary dies (a -timeout
// panic, a ^C), so that no gatewaysim holding 20 s answers or payrouter outlives the run.
func setProcAttr(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
