package tools

import (
	"context"
	"strings"
	"sync"
	"testing"
)

func named(name string, risk RiskLevel) Tool {
	return Define(Def{Name: name, Risk: risk, Run: func(context.Context, Call) (Result, error) { return Result{OK: true}, nil }})
}

// TestRegistryReplace: a source's tools are swapped at once, the others
// kept; a bad replacement changes nothing; readers running meanwhile see
// one version or the other (under -race).
func TestRegistryReplace(t *testing.T) {
	r, err := NewRegistry(named("echo", RiskLow), named("mcp__a__x", RiskLow), named("mcp__a__y", RiskHigh), named("mcp__b__z", RiskLow))
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	stop := make(chan struct{})
	wg.Go(func() {
		for {
			select {
			case <-stop:
				return
			default:
			}
			for _, n := range r.Names() {
				_, _ = r.Risk(n)
				_, _ = r.Spec(n)
			}
		}
	})
	if err := r.Replace("mcp__a__", []Tool{named("mcp__a__w", RiskMedium)}); err != nil {
		t.Fatal(err)
	}
	close(stop)
	wg.Wait()
	if got := strings.Join(r.Names(), ","); got != "echo,mcp__a__w,mcp__b__z" {
		t.Errorf("after the swap: %s", got)
	}
	for _, bad := range [][]Tool{{named("mcp__b__q", RiskLow)}, {named("mcp__a__bad name", RiskLow)}, {named("mcp__a__d", RiskLow), named("mcp__a__d", RiskLow)}} {
		if err := r.Replace("mcp__a__", bad); err == nil {
			t.Errorf("Replace(%v) accepted", bad)
		}
	}
	if err := r.Replace("", nil); err == nil {
		t.Error("an empty prefix was accepted")
	}
	if got := strings.Join(r.Names(), ","); got != "echo,mcp__a__w,mcp__b__z" {
		t.Errorf("a refused swap changed the registry: %s", got)
	}
}
