package termsafe

import (
	"io"
	"os"
)

// IsTerminalWriter reports whether w is a file that is a terminal, for a
// progress bar that redraws its line.
func IsTerminalWriter(w io.Writer) bool {
	f, ok := w.(*os.File)
	return ok && IsTerminal(f.Fd())
}
