package main

import (
	"testing"

	"github.com/orderly-go/orderly/internal/leakcheck"
)

func TestMain(m *testing.M) { leakcheck.Main(m) }
