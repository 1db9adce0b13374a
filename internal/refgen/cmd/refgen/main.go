// Command refgen writes the reference pages of docs/reference from the code
// (package internal/refgen). Run it from the repository's root, or give the
// root with -root:
//
//	go run ./internal/refgen/cmd/refgen
//	go generate ./internal/refgen
package main

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"slices"

	"github.com/noeta-go/noeta/internal/refgen"
)

func main() {
	root := flag.String("root", ".", "the repository's root")
	flag.Parse()
	pages, err := refgen.Pages(*root)
	if err != nil {
		fmt.Fprintln(os.Stderr, "refgen:", err)
		os.Exit(1)
	}
	names := make([]string, 0, len(pages))
	for n := range pages {
		names = append(names, n)
	}
	slices.Sort(names)
	for _, n := range names {
		p := filepath.Join(*root, n)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			fmt.Fprintln(os.Stderr, "refgen:", err)
			os.Exit(1)
		}
		if err := os.WriteFile(p, pages[n], 0o644); err != nil {
			fmt.Fprintln(os.Stderr, "refgen:", err)
			os.Exit(1)
		}
		fmt.Println("wrote", n)
	}
}
