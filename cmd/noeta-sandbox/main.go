// Command noeta-sandbox is the sandbox's helper binary: the small program
// the engine starts as the first and second process of every sandboxed
// tool process (package sandbox), so that a call does not pay the engine's
// own start-up twice. Installed beside the engine binary it is found and
// used; without it the engine re-executes itself.
package main

import (
	"fmt"
	"os"

	"github.com/noeta-go/noeta/tools/sandbox"
)

func main() {
	sandbox.Main()
	fmt.Fprintln(os.Stderr, "noeta-sandbox: this is the sandbox's helper, started by the engine; it has nothing to do on its own")
	os.Exit(2)
}
