//go:build !unix

package main

import "os/exec"

// killGroupOnCancel: without process groups, the cancellation of cmd's
// context kills the command itself (exec's default).
func killGroupOnCancel(*exec.Cmd) {}
