// Command noeta-sandbox is the sandbox's helper binary: the small program
// the engine starts as the first process of every sandboxed tool process
// (package tools/sandbox). It links only the helper's own code
// (internal/sandboxinit), so that a call pays the start-up of a small
// program, not of the engine. Installed beside the engine binary, or named
// by $NOETA_SANDBOX_HELPER, it is found and used; without it the engine
// re-executes itself.
package main

import (
	"fmt"
	"os"

	"github.com/noeta-go/noeta/internal/sandboxinit"
)

func main() {
	if len(os.Args) > 0 && os.Args[0] == sandboxinit.Name {
		sandboxinit.Run()
	}
	fmt.Fprintln(os.Stderr, "noeta-sandbox: this is the sandbox's helper, started by the engine; it has nothing to do on its own")
	os.Exit(2)
}
