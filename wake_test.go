package noeta

import (
	"testing"
	"time"
)

func TestMatches(t *testing.T) {
	t0 := time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC)
	sub := SubtaskCompletedWake("c1")
	grp := GroupCompletedWake("g-1", []string{"a", "b"})
	hum := HumanResponseWake("approval-x")
	tim := TimerWake(t0)
	ext := ExternalWake("deploy")
	all := []Wake{sub, grp, hum, tim, ext}

	tests := []struct {
		name        string
		cond, event *Wake
		want        bool
	}{
		{"nil condition", nil, &sub, false},
		{"nil event", &sub, nil, false},
		{"both nil", nil, nil, false},
		{"subtask same id", &sub, ptr(SubtaskCompletedWake("c1")), true},
		{"subtask other id", &sub, ptr(SubtaskCompletedWake("c2")), false},
		{"subtask result fields ignored", &sub, &Wake{Kind: WakeSubtaskCompleted, SubtaskID: "c1", Text: "x"}, true},
		{"group same id other members", &grp, ptr(GroupCompletedWake("g-1", []string{"z"})), true},
		{"group other id", &grp, ptr(GroupCompletedWake("g-2", []string{"a", "b"})), false},
		{"human same handle", &hum, &Wake{Kind: WakeHumanResponse, Handle: "approval-x", Decision: "approve", Approver: "ops"}, true},
		{"human other handle", &hum, ptr(HumanResponseWake("approval-y")), false},
		{"external same kind", &ext, &Wake{Kind: WakeExternalEvent, EventKind: "deploy", Data: []byte(`{"v":1}`)}, true},
		{"external other kind", &ext, ptr(ExternalWake("build")), false},
		{"timer exactly at deadline", &tim, ptr(TimerWake(t0)), true},
		{"timer after deadline", &tim, ptr(TimerWake(t0.Add(time.Nanosecond))), true},
		{"timer before deadline", &tim, ptr(TimerWake(t0.Add(-time.Nanosecond))), false},
		{"timer in another zone same instant", &tim, &Wake{Kind: WakeTimerFired, FireAt: t0.In(time.FixedZone("x", 3600))}, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := Matches(tt.cond, tt.event); got != tt.want {
				t.Errorf("Matches = %v, want %v", got, tt.want)
			}
		})
	}
	// Different kinds never match, whatever their fields.
	for i := range all {
		for j := range all {
			if i == j {
				continue
			}
			c, e := all[i], all[j]
			if Matches(&c, &e) {
				t.Errorf("Matches(%s, %s) = true, want false", c.Kind, e.Kind)
			}
		}
	}
}

func ptr[T any](v T) *T { return &v }

func TestWakeValidate(t *testing.T) {
	tests := []struct {
		name string
		w    Wake
		ok   bool
	}{
		{"subtask", SubtaskCompletedWake("c"), true},
		{"subtask without id", Wake{Kind: WakeSubtaskCompleted}, false},
		{"group", GroupCompletedWake("g", nil), true},
		{"group without id", Wake{Kind: WakeSubtaskGroupCompleted}, false},
		{"human", HumanResponseWake("h"), true},
		{"human without handle", Wake{Kind: WakeHumanResponse}, false},
		{"timer", TimerWake(time.Unix(1, 0)), true},
		{"timer without deadline", Wake{Kind: WakeTimerFired}, false},
		{"external", ExternalWake("k"), true},
		{"external without kind", Wake{Kind: WakeExternalEvent}, false},
		{"external with bad data", Wake{Kind: WakeExternalEvent, EventKind: "k", Data: []byte("{")}, false},
		{"empty kind", Wake{}, false},
		{"unknown kind", Wake{Kind: "email"}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.w.Validate()
			if (err == nil) != tt.ok {
				t.Errorf("Validate() = %v, want ok=%v", err, tt.ok)
			}
		})
	}
}

func TestWakeEqualAndEncoding(t *testing.T) {
	t0 := time.Date(2026, 5, 1, 12, 0, 0, 123456789, time.FixedZone("x", 7200))
	a := TimerWake(t0)
	b := TimerWake(t0.UTC())
	if !a.Equal(b) {
		t.Errorf("timer wakes of the same instant in two zones are not Equal")
	}
	got, err := Canonical(a)
	if err != nil {
		t.Fatal(err)
	}
	if want := `{"fire_at":"2026-05-01T10:00:00.123456789Z","kind":"timer_fired"}`; string(got) != want {
		t.Errorf("canonical timer wake = %s, want %s", got, want)
	}
	if SubtaskCompletedWake("a").Equal(SubtaskCompletedWake("b")) {
		t.Errorf("different subtask wakes are Equal")
	}
	c := GroupCompletedWake("g", []string{"a"})
	d := c.Clone()
	d.SubtaskIDs[0] = "z"
	if c.SubtaskIDs[0] != "a" {
		t.Errorf("Clone shares SubtaskIDs")
	}
}

func TestDeriveGroupID(t *testing.T) {
	// The reference's probe value for ("a", "b").
	if got, want := DeriveGroupID([]string{"a", "b"}), "g-6783a31eabf68ccc"; got != want {
		t.Errorf("DeriveGroupID(a, b) = %s, want %s", got, want)
	}
}

func BenchmarkMatches(b *testing.B) {
	t0 := time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC)
	cases := []struct {
		name        string
		cond, event Wake
	}{
		{"subtask", SubtaskCompletedWake("01JDX3K5V7Q9R2T4W6Y8Z0A1B3"), SubtaskCompletedWake("01JDX3K5V7Q9R2T4W6Y8Z0A1B3")},
		{"timer", TimerWake(t0), TimerWake(t0.Add(time.Second))},
		{"kind-mismatch", HumanResponseWake("h"), ExternalWake("h")},
	}
	for _, c := range cases {
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if !Matches(&c.cond, &c.event) && c.name != "kind-mismatch" {
					b.Fatal("no match")
				}
			}
		})
	}
}
