package simpleworkflow

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"
)

func TestDelayFollowsTheSeedsQuadraticBackoff(t *testing.T) {
	none := func() float64 { return 0 }
	full := func() float64 { return 1 }
	for failures, want := range map[int]time.Duration{1: time.Minute, 2: 4 * time.Minute, 3: 9 * time.Minute} {
		if got := DefaultRetry.Delay(failures, none); got != want {
			t.Errorf("after %d failures: %v, want %v", failures, got, want)
		}
		if got := DefaultRetry.Delay(failures, full); got != want+want/10 {
			t.Errorf("after %d failures with full jitter: %v, want %v", failures, got, want+want/10)
		}
	}
	if got := DefaultRetry.Delay(1000, none); got != 6*time.Hour {
		t.Errorf("the cap: %v", got)
	}
	exp := RetryPolicy{Backoff: Exponential, Base: time.Second, Factor: 2, Cap: time.Hour}
	if got := exp.Delay(4, none); got != 8*time.Second {
		t.Errorf("exponential after 4: %v", got)
	}
}

func TestRetryPolicyRefusesNonsense(t *testing.T) {
	for _, p := range []RetryPolicy{
		{Backoff: "sometimes"},
		{Backoff: Fixed, Jitter: 2},
		{Backoff: Exponential, Factor: 0.5},
	} {
		var bad *InvalidArgument
		if err := p.check(); !errors.As(err, &bad) {
			t.Errorf("%+v: %v, want an InvalidArgument", p, err)
		}
	}
}

func TestPermanentErrorsAreFoundThroughWrapping(t *testing.T) {
	err := Permanent(errors.New("no"))
	if !IsPermanent(err) || !IsPermanent(fmt.Errorf("wrapped: %w", err)) {
		t.Error("a permanent error was not recognised")
	}
	if IsPermanent(errors.New("no")) {
		t.Error("a plain error taken for a permanent one")
	}
}

func TestPrefixesSelectTypesAsThePythonWorkerDoes(t *testing.T) {
	cases := []struct {
		prefix, name string
		want         bool
	}{
		{"billing.%", "billing.invoice.v1", true},
		{"billing.", "billing.invoice.v1", true},
		{"billing", "billing.invoice.v1", true},
		{"billing", "billingx.invoice.v1", false},
		{"%", "content.ocr.v1", true},
		{"billing.invoice.v1", "billing.invoice.v1", true},
		{"billing.invoice.v1", "billing.invoice.v12", false},
		{"content.%", "billing.invoice.v1", false},
	}
	for _, c := range cases {
		if got := prefixMatches(c.prefix, c.name); got != c.want {
			t.Errorf("%q selects %q: %v, want %v", c.prefix, c.name, got, c.want)
		}
	}
	if err := validatePrefix("Billing.%"); err == nil {
		t.Error("an upper-case prefix was accepted")
	}
}

func TestTypeNamesAreChecked(t *testing.T) {
	for _, name := range []string{"content.thumbnail.v1", "billing.invoice.send.v2"} {
		if err := ValidateType(name); err != nil {
			t.Errorf("%s: %v", name, err)
		}
	}
	for _, name := range []string{"", "thumbnail.v1", "Content.thumb.v1", "content.thumb", "content..thumb.v1"} {
		var bad *InvalidArgument
		if err := ValidateType(name); !errors.As(err, &bad) || bad.Field != "type" {
			t.Errorf("%q: %v, want an InvalidArgument naming the type", name, err)
		}
	}
}

func TestMarginIsAFifthOfTheLeaseWithinBounds(t *testing.T) {
	for lease, want := range map[time.Duration]time.Duration{
		30 * time.Second: 6 * time.Second,
		2 * time.Second:  500 * time.Millisecond,
		4 * time.Second:  time.Second,
	} {
		if got := margin(lease); got != want {
			t.Errorf("margin(%v) = %v, want %v", lease, got, want)
		}
	}
}

func TestACrashIsChargedOnlyToASuspect(t *testing.T) {
	beside := expired{id: "r", attempt: 0, maxAttempts: 3}
	first := beside.outcome("w2")
	if first["charged"] != false || first["suspect"] != false || first["crashes"] != 1 {
		t.Errorf("a first crash beside others: %v", first)
	}
	beside.crashes = 1
	if second := beside.outcome("w2"); second["suspect"] != true || second["final"] != false {
		t.Errorf("a second crash makes a suspect: %v", second)
	}
	alone := expired{id: "r", attempt: 2, maxAttempts: 3, isolate: true}
	if last := alone.outcome("w2"); last["charged"] != true || last["final"] != true {
		t.Errorf("a suspect's last crash fails the run: %v", last)
	}
}

func TestNotificationsWakeAndCancel(t *testing.T) {
	w, err := NewWorker(&Client{schema: "workflow"}, PollerConfig{Logf: func(string, ...any) {}})
	if err != nil {
		t.Fatal(err)
	}
	mine := map[string]bool{"billing.invoice.v1": true}
	w.notified("wake other billing.invoice.v1", mine)
	w.notified("wake workflow content.ocr.v1", mine)
	select {
	case <-w.wake:
		t.Fatal("woken by another schema's or another type's run")
	default:
	}
	w.notified("wake workflow billing.invoice.v1", mine)
	select {
	case <-w.wake:
	default:
		t.Fatal("not woken by a run of its type")
	}
	j := &Job{ID: "0b7e2f4e-6a43-4a4e-9c4e-000000000001"}
	j.ctx, j.stop = context.WithCancel(context.Background())
	w.held[j.ID] = j
	w.notified("cancel workflow "+j.ID, mine)
	if !j.IsCancelled() || j.ctx.Err() == nil {
		t.Fatal("a cancel notification did not stop the handler")
	}
}

func TestBadConfigurationIsRefused(t *testing.T) {
	for _, cfg := range []PollerConfig{
		{TypePrefixes: []string{"Bad%"}},
		{LeaseDuration: time.Millisecond},
		{Concurrency: -1},
	} {
		var bad *InvalidArgument
		if _, err := NewWorker(&Client{}, cfg); !errors.As(err, &bad) {
			t.Errorf("%+v: %v, want an InvalidArgument", cfg, err)
		}
	}
	if _, err := Open("postgres://x/y", "bad schema"); err == nil {
		t.Error("a schema name with a space was accepted")
	}
}
