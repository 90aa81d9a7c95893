package simpleworkflow

import (
	"context"
	"encoding/json"
	"sync"
	"time"

	"github.com/lib/pq"
)

// Why a handler was asked to stop.
const (
	StopCancelled = "cancelled"  // the run was cancelled
	StopLeaseLost = "lease lost" // the worker could not keep its lease: another may run it
	StopShutdown  = "shutdown"   // the worker is stopping and the grace is over
)

// Job is one attempt of a run, as its handler sees it.
type Job struct {
	ID          string
	Type        string
	Payload     json.RawMessage
	Attempt     int // this attempt's number, from 1
	MaxAttempts int
	Deadline    *time.Time // the run fails if not finished by then; its context ends then

	pastDeadline bool
	token        string
	isolated     bool
	ctx          context.Context
	stop         context.CancelFunc

	mu         sync.Mutex
	reason     string
	validUntil time.Time // the lease surely holds until then (the worker's clock)
}

// Decode reads the payload into v.
func (j *Job) Decode(v any) error { return json.Unmarshal(j.Payload, v) }

// IsCancelled says whether the run was cancelled: the handler should stop, and its
// outcome is not recorded.
func (j *Job) IsCancelled() bool { return j.StopReason() == StopCancelled }

// StopReason says why the handler's context ended ("" while it should go on).
func (j *Job) StopReason() string {
	j.mu.Lock()
	defer j.mu.Unlock()
	return j.reason
}

// halt asks the handler to stop; the first reason stays.
func (j *Job) halt(reason string) {
	j.mu.Lock()
	if j.reason == "" {
		j.reason = reason
	}
	j.mu.Unlock()
	j.stop()
}

func (j *Job) lease() time.Time {
	j.mu.Lock()
	defer j.mu.Unlock()
	return j.validUntil
}

func (j *Job) renewed(until time.Time) {
	j.mu.Lock()
	if until.After(j.validUntil) {
		j.validUntil = until
	}
	j.mu.Unlock()
}

func stringArray(values []string) any { return pq.Array(values) }
