package main

import (
	"os"
	"testing"

	"github.com/orderly-go/orderly/internal/leakcheck"
)

// asMain makes the test binary run main instead of the tests, so that a
// test can run the example as a process of its own and kill it.
const asMain = "ORDERLY_EXAMPLE_AS_MAIN"

func TestMain(m *testing.M) {
	if os.Getenv(asMain) == "1" {
		main()
		return
	}
	leakcheck.Main(m)
}
