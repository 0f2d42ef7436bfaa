package main

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/orderly-go/orderly/group"
	"github.com/orderly-go/orderly/internal/deadletter"
)

// TestRunErrorKeepsEndOfStderr: a failed --exec run's error, as its dead
// letter's message keeps it (deadletter.CutMessage of the item's error,
// itemErr), names the item, the command and exit status and ends with the
// end of the command's stderr, where a command says why it failed; it
// wraps the run's error.
func TestRunErrorKeepsEndOfStderr(t *testing.T) {
	exit := errors.New("exit status 9")
	var progress strings.Builder
	for i := range 400 {
		fmt.Fprintf(&progress, "progress line %d of the batch\n", i)
	}
	const script = "./handle.sh"
	long := "python3 -c '" + strings.Repeat("import os; ", 200) + "'"
	for _, tt := range []struct {
		name, cmd, stderr, wantEnd string
	}{
		{"short", script, "bad record v57", "stderr: bad record v57"},
		{"long, the cause last", script, progress.String() + "FATAL: the actual cause is here", "FATAL: the actual cause is here"},
		{"long, multi-byte", script, strings.Repeat("é", 2000) + " fin", "é fin"},
		{"long command", long, progress.String() + "FATAL: the actual cause is here", "FATAL: the actual cause is here"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			batch := []*group.Message{{Topic: "orders", Partition: 3, Offset: 123456}, {Topic: "orders", Partition: 3, Offset: 7}}
			err := itemErr(batch[0], runError(tt.cmd, exit, tt.stderr, itemPrefixLen(batch)))
			if !errors.Is(err, exit) {
				t.Errorf("runError(...) = %v: does not wrap the run's error", err)
			}
			msg := deadletter.CutMessage(err.Error())
			if !strings.HasPrefix(msg, `orders/3@123456: --exec "`+tt.cmd[:min(len(tt.cmd), 40)]) || !strings.Contains(msg, `: exit status 9; stderr: `) || !strings.HasSuffix(msg, tt.wantEnd) ||
				len(msg) > deadletter.MaxMessage || !utf8.ValidString(msg) {
				t.Errorf("dead letter message (%d bytes): got %q\nwant the command and exit status first, ending %q, at most %d bytes of UTF-8",
					len(msg), msg, tt.wantEnd, deadletter.MaxMessage)
			}
		})
	}
}
