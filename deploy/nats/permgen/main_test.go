package main

import (
	"bytes"
	"os"
	"strings"
	"testing"
)

// TestUsersConfIsGenerated: deploy/nats's users.conf is what permgen
// writes, so a hand edit or a change to permgen not regenerated shows.
func TestUsersConfIsGenerated(t *testing.T) {
	want, err := usersConf("noeta")
	if err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile("../users.conf")
	if err != nil {
		t.Fatal(err)
	}
	if string(got) != want {
		t.Errorf("users.conf is not what permgen writes: run go generate ./deploy/nats")
	}
}

// TestObserverNamesItsConsumersOnly: an observer's permissions name each
// of its groups' 64 consumers, for every operation on them, and no
// consumer by wildcard: a wildcard would reach another group's.
func TestObserverNamesItsConsumersOnly(t *testing.T) {
	s, err := observerBlock("noeta", observer{name: "w1", groups: []string{"g1", "g2"}})
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		`"$JS.API.CONSUMER.CREATE.NOETA_TASKS.g1-p00.noeta.t.0.>"`,
		`"$JS.API.CONSUMER.CREATE.NOETA_TASKS.g2-p63.noeta.t.63.>"`,
		`"$JS.API.CONSUMER.MSG.NEXT.NOETA_TASKS.g2-p07"`,
		`"$JS.API.CONSUMER.DELETE.NOETA_TASKS.g1-p63"`,
		`"$JS.API.CONSUMER.INFO.NOETA_TASKS.g1-p10"`,
		`"$JS.ACK.NOETA_TASKS.g2-p31.>"`,
		`"noeta.dlq.g1"`, `"noeta.quarantine.g2"`,
		"OBSERVER_W1_PERMISSIONS = {",
	} {
		if !strings.Contains(s, want) {
			t.Errorf("missing %s", want)
		}
	}
	for _, line := range strings.Split(s, "\n") {
		if strings.Contains(line, "CONSUMER") && strings.Contains(line, "NOETA_TASKS.*") || strings.Contains(line, "$JS.ACK.NOETA_TASKS.>") {
			t.Errorf("a wildcard consumer: %s", line)
		}
	}
	if n := strings.Count(s, "$JS.API.CONSUMER.MSG.NEXT."); n != 2*Partitions {
		t.Errorf("%d consumers pulled, want %d", n, 2*Partitions)
	}
}

// TestBadNames: a name that cannot be a subject token, a group named twice
// or a verb without its arguments is refused, naming what is wrong.
func TestBadNames(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"approver", "cli:alice"}, `approver "cli:alice": want 1-64 of`},
		{[]string{"approver", "a.b"}, `approver "a.b"`},
		{[]string{"approver"}, "approver NAME: one user name"},
		{[]string{"observer", "w"}, "at least one consumer group"},
		{[]string{"observer", "w", "g", "g"}, `group "g" named twice`},
		{[]string{"observer", "w", "a>b"}, `group "a>b"`},
		{[]string{"observer", "w*", "g"}, `observer user "w*"`},
		{[]string{"-prefix", "no.eta", "users"}, `-prefix "no.eta"`},
		{[]string{"wake"}, `unknown verb "wake"`},
	} {
		var out bytes.Buffer
		err := run(tc.args, &out)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v: %v, want an error with %q", tc.args, err, tc.want)
		}
		if out.Len() != 0 {
			t.Errorf("%v wrote %q", tc.args, out.String())
		}
	}
}
