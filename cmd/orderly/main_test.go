package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"

	"github.com/orderly-go/orderly/internal/leakcheck"
)

// binDir holds the orderly binary built once for the multi-process tests.
var binDir string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "orderly-bin-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	binDir = dir
	code := m.Run()
	os.RemoveAll(dir)
	// Like leakcheck.Main, but removing binDir first: once every test has
	// run, nothing the in-process demo, broker or bench started may still
	// be running.
	if code == 0 {
		if err := leakcheck.Find(); err != nil {
			fmt.Fprintf(os.Stderr, "goleak: errors on successful test run: %v\n", err)
			code = 1
		}
	}
	os.Exit(code)
}

var (
	buildOnce sync.Once
	buildErr  error
	binPath   string
)

// orderlyBin builds the orderly binary once and returns its path.
func orderlyBin(t *testing.T) string {
	t.Helper()
	buildOnce.Do(func() {
		binPath = filepath.Join(binDir, "orderly")
		out, err := exec.Command("go", "build", "-o", binPath, ".").CombinedOutput()
		if err != nil {
			buildErr = fmt.Errorf("go build: %w\n%s", err, out)
		}
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return binPath
}
