package engine

// ChildIDs exposes the derivation of a spawn's child ids, so a test can
// create a child before its parent's spawn does (as a spawn that was cut
// short and resumed finds it).
func ChildIDs(parent string, turn, n int) []string { return childIDs(parent, turn, n) }
