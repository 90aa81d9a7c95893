package simpleworkflow

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"log"
	"os"
	"sort"
	"sync"
	"time"
)

// PollerConfig is a worker's configuration, as seed 000 names it.
type PollerConfig struct {
	// TypePrefixes select which registered handlers this worker runs: 'billing.%',
	// 'billing.' or 'billing' (every type under billing.), a whole type name, or '%'.
	TypePrefixes []string
	// LeaseDuration is how long a claim or heartbeat holds a run (default 30 s); the
	// worker renews it every third of it.
	LeaseDuration time.Duration
	// WorkerID names the worker in leases and events (default host-pid).
	WorkerID string
	// Concurrency is how many handlers run at once (default 10).
	Concurrency int
	// PollInterval is the longest wait between claims when no notification comes
	// (default 1 s).
	PollInterval time.Duration
	// ShutdownGrace is how long a graceful stop lets running handlers finish before
	// their contexts end and their runs are given back (default 10 s).
	ShutdownGrace time.Duration
	// Logf logs what the worker does (default log.Printf; a no-op func silences it).
	Logf func(format string, args ...any)
}

// Handler runs one attempt of a run. Its result is stored as JSON; an error fails the
// attempt (a PermanentError fails the run). ctx ends when the run is cancelled, its
// lease is lost, or the worker stops after its grace.
type Handler func(ctx context.Context, job *Job) (any, error)

// HandlerOption changes how a type's runs are handled.
type HandlerOption func(*handlerEntry)

// WithRetry sets the backoff between the attempts of a type's runs.
func WithRetry(policy RetryPolicy) HandlerOption {
	return func(e *handlerEntry) { e.retry = policy }
}

type handlerEntry struct {
	run   Handler
	retry RetryPolicy
}

// Worker claims due runs of its types, runs their handlers and records their outcomes.
type Worker struct {
	client   *Client
	cfg      PollerConfig
	handlers map[string]handlerEntry
	types    []string
	logf     func(string, ...any)

	mu      sync.Mutex
	held    map[string]*Job // by run id
	suspect bool            // holding a suspect: claim nothing more
	running sync.WaitGroup

	wake     chan struct{}
	outcomes chan outcome
	closed   chan struct{} // Run has returned: outcomes are no longer recorded
}

// NewWorker makes a worker that uses client's connections.
func NewWorker(client *Client, cfg PollerConfig) (*Worker, error) {
	if len(cfg.TypePrefixes) == 0 {
		cfg.TypePrefixes = []string{"%"}
	}
	for _, p := range cfg.TypePrefixes {
		if err := validatePrefix(p); err != nil {
			return nil, err
		}
	}
	if cfg.LeaseDuration == 0 {
		cfg.LeaseDuration = 30 * time.Second
	}
	if cfg.LeaseDuration < time.Second {
		return nil, invalid("LeaseDuration", "at least 1s, not %v", cfg.LeaseDuration)
	}
	if cfg.WorkerID == "" {
		host, _ := os.Hostname()
		cfg.WorkerID = fmt.Sprintf("%s-%d", host, os.Getpid())
	}
	if cfg.Concurrency == 0 {
		cfg.Concurrency = 10
	}
	if cfg.Concurrency < 1 {
		return nil, invalid("Concurrency", "at least 1, not %d", cfg.Concurrency)
	}
	if cfg.PollInterval == 0 {
		cfg.PollInterval = time.Second
	}
	if cfg.ShutdownGrace == 0 {
		cfg.ShutdownGrace = 10 * time.Second
	}
	logf := cfg.Logf
	if logf == nil {
		logf = log.Printf
	}
	return &Worker{
		client: client, cfg: cfg, handlers: map[string]handlerEntry{}, logf: logf,
		held: map[string]*Job{}, wake: make(chan struct{}, 1),
		outcomes: make(chan outcome, maxBatch), closed: make(chan struct{}),
	}, nil
}

// Handle registers the handler of a type. Call it before Run.
func (w *Worker) Handle(typeName string, h Handler, opts ...HandlerOption) error {
	if err := ValidateType(typeName); err != nil {
		return err
	}
	if h == nil {
		return invalid("handler", "nil handler for %s", typeName)
	}
	entry := handlerEntry{run: h, retry: DefaultRetry}
	for _, opt := range opts {
		opt(&entry)
	}
	if err := entry.retry.check(); err != nil {
		return err
	}
	w.handlers[typeName] = entry
	return nil
}

// ID is the worker's id, as its leases and events name it.
func (w *Worker) ID() string { return w.cfg.WorkerID }

// Types are the registered types this worker's prefixes select: the ones it claims.
func (w *Worker) Types() []string {
	var types []string
	for name := range w.handlers {
		for _, p := range w.cfg.TypePrefixes {
			if prefixMatches(p, name) {
				types = append(types, name)
				break
			}
		}
	}
	sort.Strings(types)
	return types
}

// Run works until ctx ends, then stops gracefully: no more claims, running handlers get
// ShutdownGrace to finish, then their contexts end and their runs are given back. Call
// it once.
func (w *Worker) Run(ctx context.Context) error {
	w.types = w.Types()
	if len(w.types) == 0 {
		return invalid("TypePrefixes", "no registered handler matches %v", w.cfg.TypePrefixes)
	}
	if err := w.register(ctx); err != nil {
		return err
	}
	w.seen(ctx, true)
	go w.outbox()
	defer close(w.closed)
	services, stopServices := context.WithCancel(context.Background())
	var side sync.WaitGroup
	for _, loop := range []func(context.Context){w.listen, w.keepLeases, w.reap} {
		side.Add(1)
		go func(loop func(context.Context)) { defer side.Done(); loop(services) }(loop)
	}
	w.logf("simpleworkflow: worker %s claiming %v", w.cfg.WorkerID, w.types)
	w.claimLoop(ctx)
	w.drain()
	stopServices()
	side.Wait()
	w.stopped()
	w.logf("simpleworkflow: worker %s stopped", w.cfg.WorkerID)
	return nil
}

// register records the runtime of its types that have none, and says which another
// runtime owns (or are paused): those it will not claim.
func (w *Worker) register(ctx context.Context) error {
	types := stringArray(w.types)
	if _, err := w.client.DB.ExecContext(ctx, sqlRegister, types, RuntimeName); err != nil {
		return fmt.Errorf("registering types: %w", err)
	}
	rows, err := w.client.DB.QueryContext(ctx, sqlOwners, types)
	if err != nil {
		return err
	}
	defer rows.Close()
	for rows.Next() {
		var name, runtime string
		var enabled bool
		if err := rows.Scan(&name, &runtime, &enabled); err != nil {
			return err
		}
		if runtime != RuntimeName {
			w.logf("simpleworkflow: %s belongs to runtime %q in workflow_registry: not claimed here", name, runtime)
		} else if !enabled {
			w.logf("simpleworkflow: %s is paused in workflow_registry", name)
		}
	}
	return rows.Err()
}

func (w *Worker) poke() {
	select {
	case w.wake <- struct{}{}:
	default:
	}
}

func (w *Worker) claimLoop(ctx context.Context) {
	timer := time.NewTimer(0)
	defer timer.Stop()
	for {
		full := w.claimOnce(ctx)
		if !full {
			timer.Reset(w.cfg.PollInterval)
			select {
			case <-ctx.Done():
				return
			case <-w.wake:
			case <-timer.C:
			}
			if !timer.Stop() {
				select {
				case <-timer.C:
				default:
				}
			}
		} else if ctx.Err() != nil {
			return
		}
	}
}

// claimOnce leases as many runs as there are free slots; true when it filled them all
// (more may be due).
func (w *Worker) claimOnce(ctx context.Context) bool {
	w.mu.Lock()
	free := w.cfg.Concurrency - len(w.held)
	alone := len(w.held) == 0
	blocked := w.suspect
	w.mu.Unlock()
	if free <= 0 || blocked || ctx.Err() != nil {
		return false
	}
	sent := time.Now()
	// Not cancelled with ctx: a claim cut off while its rows are read would leave runs
	// leased to no one until their leases ran out. Bounded by the lease, for a store
	// that stopped answering.
	bounded, cancel := context.WithTimeout(context.Background(), w.cfg.LeaseDuration)
	defer cancel()
	rows, err := w.client.DB.QueryContext(bounded, sqlClaim, stringArray(w.types), w.cfg.WorkerID,
		free, alone, RuntimeName, w.cfg.LeaseDuration.Seconds())
	if err != nil {
		w.logf("simpleworkflow: claim failed: %v", err)
		return false
	}
	var jobs []*Job
	for rows.Next() {
		j := &Job{}
		var payload []byte
		var deadline sql.NullTime
		var past sql.NullBool
		if err := rows.Scan(&j.ID, &j.Type, &payload, &j.Attempt, &j.MaxAttempts, &j.token, &j.isolated, &deadline, &past); err != nil {
			w.logf("simpleworkflow: reading a claim: %v", err)
			continue
		}
		j.Payload = payload
		if deadline.Valid {
			j.Deadline, j.pastDeadline = &deadline.Time, past.Bool
		}
		j.Attempt++ // the attempt under way, from 1
		j.validUntil = sent.Add(w.cfg.LeaseDuration)
		jobs = append(jobs, j)
	}
	if err := rows.Err(); err != nil {
		w.logf("simpleworkflow: claim failed: %v", err)
	}
	rows.Close()
	for _, j := range jobs {
		w.start(j)
	}
	return len(jobs) == free
}

func (w *Worker) start(j *Job) {
	entry := w.handlers[j.Type]
	if j.Deadline != nil {
		j.ctx, j.stop = context.WithDeadline(context.Background(), *j.Deadline)
	} else {
		j.ctx, j.stop = context.WithCancel(context.Background())
	}
	w.mu.Lock()
	w.held[j.ID] = j
	if j.isolated {
		w.suspect = true
	}
	w.mu.Unlock()
	w.running.Add(1)
	go func() {
		defer w.running.Done()
		var result any
		var err error
		if j.pastDeadline { // not run: it can no longer finish in time
			err = &DeadlineExceeded{Deadline: *j.Deadline}
		} else {
			result, err = call(entry.run, j)
		}
		w.finish(j, entry, result, err)
		j.stop()
		w.mu.Lock()
		delete(w.held, j.ID)
		if j.isolated {
			w.suspect = false
		}
		w.mu.Unlock()
		w.poke()
	}()
}

// call runs a handler, turning a panic into an error.
func call(h Handler, j *Job) (result any, err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("handler panicked: %v", p)
		}
	}()
	return h(j.ctx, j)
}

// finish records what one attempt came to. A run cancelled under its handler, or whose
// lease was lost, gets nothing: its row is no longer this worker's to write (and the
// statements, fenced by the lease token, would match nothing anyway).
func (w *Worker) finish(j *Job, entry handlerEntry, result any, err error) {
	switch j.StopReason() {
	case StopCancelled, StopLeaseLost:
		return
	case StopShutdown:
		if err != nil {
			w.send(j, sqlRelease, map[string]any{"id": j.ID, "token": j.token})
			return
		}
	}
	if err == nil {
		encoded, merr := json.Marshal(result)
		if merr == nil {
			w.send(j, sqlSucceed, map[string]any{"id": j.ID, "token": j.token, "result": string(encoded)})
			return
		}
		err = Permanent(fmt.Errorf("the handler's result is not JSON: %w", merr))
	}
	w.send(j, sqlFail, w.failure(j, entry, err))
}

func (w *Worker) failure(j *Job, entry handlerEntry, err error) map[string]any {
	var late *DeadlineExceeded
	if j.Deadline != nil && !errors.As(err, &late) && !time.Now().Before(*j.Deadline) {
		err = &DeadlineExceeded{Deadline: *j.Deadline, Err: err}
	}
	retryable := !IsPermanent(err) && !errors.As(err, &late)
	final := !retryable || j.Attempt >= j.MaxAttempts
	message := err.Error()
	if len(message) > 2000 {
		message = message[:2000]
	}
	data := map[string]any{
		"worker_id": w.cfg.WorkerID,
		"error":     map[string]any{"type": errorType(err), "message": message},
	}
	if !retryable {
		data["retryable"] = false
	}
	delay := 0.0
	if !final {
		delay = entry.retry.Delay(j.Attempt, nil).Seconds()
	}
	return map[string]any{
		"id": j.ID, "token": j.token, "final": final, "delay": delay, "error": message,
		"data": data, "charged": true, "suspect": false, "crashes": 0, "keep_place": false,
	}
}

func errorType(err error) string {
	var late *DeadlineExceeded
	if errors.As(err, &late) {
		return "DeadlineExceeded"
	}
	var p *PermanentError
	if errors.As(err, &p) {
		return fmt.Sprintf("%T", p.Err)
	}
	return fmt.Sprintf("%T", err)
}

// drain waits ShutdownGrace for running handlers, then ends their contexts and waits a
// little more for them to return (each gives its run back). A handler that ignores its
// context keeps its run leased until the lease runs out.
func (w *Worker) drain() {
	done := make(chan struct{})
	go func() { w.running.Wait(); close(done) }()
	select {
	case <-done:
		return
	case <-time.After(w.cfg.ShutdownGrace):
	}
	w.mu.Lock()
	for _, j := range w.held {
		j.halt(StopShutdown)
	}
	w.mu.Unlock()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		w.logf("simpleworkflow: handlers still running after the grace; their runs stay leased until their leases end")
	}
}
