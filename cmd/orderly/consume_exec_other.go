//go:build !unix

package main

import (
	"os/exec"

	"go.uber.org/zap"
)

// runCommand runs cmd: without process groups, the cancellation of its
// context kills the command itself (exec's default), and what it started
// outlives it, as it outlives consume.
func runCommand(cmd *exec.Cmd, _ *zap.Logger) error { return cmd.Run() }

// execGuardMain: there is no exec guard here.
func execGuardMain() int { return 2 }
