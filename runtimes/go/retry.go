package simpleworkflow

import (
	"errors"
	"fmt"
	"math"
	"math/rand"
	"time"
)

// Backoff says how the delay grows with the failed attempts n (1 after the first).
type Backoff string

const (
	Fixed       Backoff = "fixed"       // Base
	Linear      Backoff = "linear"      // Base × n
	Exponential Backoff = "exponential" // Base × Factor^(n-1)
	Quadratic   Backoff = "quadratic"   // Base × n²: the default, as in the seed
)

// RetryPolicy is the delay before the next attempt of a run whose attempt failed. How
// many attempts a run gets is its max_attempts column.
type RetryPolicy struct {
	Backoff Backoff
	Base    time.Duration
	Factor  float64
	Cap     time.Duration
	Jitter  float64 // up to this fraction of the delay is added at random
}

// DefaultRetry is the Python runtime's default: quadratic from one minute, 10 % jitter,
// at most six hours: about 1, 4, 9 ... minutes.
var DefaultRetry = RetryPolicy{Backoff: Quadratic, Base: time.Minute, Factor: 2, Cap: 6 * time.Hour, Jitter: 0.1}

func (p RetryPolicy) check() error {
	switch p.Backoff {
	case Fixed, Linear, Exponential, Quadratic:
	default:
		return invalid("Retry.Backoff", "unknown backoff %q; use fixed, linear, exponential or quadratic", p.Backoff)
	}
	if p.Base < 0 || p.Cap < 0 {
		return invalid("Retry", "Base and Cap must not be negative")
	}
	if p.Jitter < 0 || p.Jitter > 1 || math.IsNaN(p.Jitter) {
		return invalid("Retry.Jitter", "must be within 0..1, not %v", p.Jitter)
	}
	if p.Backoff == Exponential && (p.Factor < 1 || math.IsInf(p.Factor, 0) || math.IsNaN(p.Factor)) {
		return invalid("Retry.Factor", "must be a finite number, at least 1, not %v", p.Factor)
	}
	return nil
}

// Delay is the wait after failures failed attempts; random gives the jitter's share
// (a number in [0, 1)).
func (p RetryPolicy) Delay(failures int, random func() float64) time.Duration {
	n := float64(failures)
	if n < 1 {
		n = 1
	}
	base := p.Base.Seconds()
	var delay float64
	switch p.Backoff {
	case Fixed:
		delay = base
	case Linear:
		delay = base * n
	case Exponential:
		delay = base * math.Pow(p.Factor, math.Min(n-1, 64))
	default:
		delay = base * n * n
	}
	if capped := p.Cap.Seconds(); delay > capped {
		delay = capped
	}
	if random == nil {
		random = rand.Float64
	}
	return time.Duration((delay + delay*p.Jitter*random()) * float64(time.Second))
}

// PermanentError fails the run at once, whatever attempts it has left.
type PermanentError struct{ Err error }

func (e *PermanentError) Error() string { return e.Err.Error() }
func (e *PermanentError) Unwrap() error { return e.Err }

// Permanent wraps err so that no retry follows it.
func Permanent(err error) error { return &PermanentError{Err: err} }

// IsPermanent says whether err, or an error it wraps, is a PermanentError.
func IsPermanent(err error) bool {
	var p *PermanentError
	return errors.As(err, &p)
}

// DeadlineExceeded fails a run whose deadline passed before it finished: at the claim
// (the handler is not called), or while its handler ran. It is never retried.
type DeadlineExceeded struct {
	Deadline time.Time
	Err      error // what the handler returned, if it ran
}

func (e *DeadlineExceeded) Error() string {
	return fmt.Sprintf("the run's deadline (%s) has passed", e.Deadline.UTC().Format(time.RFC3339Nano))
}

func (e *DeadlineExceeded) Unwrap() error { return e.Err }
