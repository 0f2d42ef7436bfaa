package flock

import (
	"fmt"
	"os"
	"strings"
)

// StatFields reads /proc/PID/stat (Linux; elsewhere the read fails) and
// returns its fields from the third on (state, ppid, ...: fields[0] is
// the state, fields[6] the flags, fields[11] and [12] utime and stime).
// The command name, field 2, may hold spaces and parentheses, so the
// fields are those after its last ')'.
func StatFields(pid int) ([]string, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return nil, err
	}
	return strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+1:])), nil
}
