package main

import (
	"os"
	"testing"

	"github.com/noeta-go/noeta/tools/sandbox"
)

func TestMain(m *testing.M) {
	sandbox.Main()
	os.Exit(m.Run())
}
