// Command swgo drives the Go runtime from the shell: the program the project's pytest
// contract tests and benchmark run.
//
//	swgo worker -types a.b.v1,c.d.v1 [-prefixes a.%] [-lease 30s] [-id w1] [-concurrency 10]
//	            [-grace 10s] [-retry 1m] [-poll 1s] [-quiet] [-wait-go]
//	swgo start -type a.b.v1 [-payload '{}'] [-key k] [-priority 100] [-delay 0s] [-max-attempts 3]
//	swgo cancel RUN_ID [-reason text]
//	swgo get RUN_ID
//
// The store is $SIMPLEWORKFLOW_DATABASE_URL, its schema $SIMPLEWORKFLOW_SCHEMA. The
// worker's handler is driven by each run's payload: {"sleep": seconds} sleeps (stopping
// when its context ends), {"fail": n} fails the first n attempts, {"permanent": true}
// fails for good, {"panic": true} panics, {"result": v} returns v (else the payload).
// With $SWGO_LEDGER set, each attempt appends a JSON line (event "started" and
// "finished", the run, type, worker and attempt) to that file.
package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"simpleworkflow"
)

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: swgo worker|start|cancel|get ...")
		os.Exit(2)
	}
	client, err := simpleworkflow.Open(os.Getenv("SIMPLEWORKFLOW_DATABASE_URL"), os.Getenv("SIMPLEWORKFLOW_SCHEMA"))
	exitOn(err)
	defer client.Close()
	ctx := context.Background()
	args := os.Args[2:]
	switch os.Args[1] {
	case "worker":
		exitOn(worker(ctx, client, args))
	case "start":
		exitOn(start(ctx, client, args))
	case "cancel":
		flags := flag.NewFlagSet("cancel", flag.ExitOnError)
		reason := flags.String("reason", "", "why")
		exitOn(flags.Parse(args[min(1, len(args)):]))
		ok, err := client.Cancel(ctx, args[0], *reason)
		exitOn(err)
		printJSON(map[string]any{"cancelled": ok})
	case "get":
		run, err := client.Get(ctx, args[0])
		exitOn(err)
		printJSON(run)
	default:
		exitOn(fmt.Errorf("unknown command %q", os.Args[1]))
	}
}

func min(a, b int) int {
	if a < b {
		return a
	}
	return b
}

func exitOn(err error) {
	if err != nil {
		fmt.Fprintln(os.Stderr, "swgo:", err)
		os.Exit(1)
	}
}

func printJSON(v any) {
	encoded, err := json.Marshal(v)
	exitOn(err)
	fmt.Println(string(encoded))
}

func start(ctx context.Context, client *simpleworkflow.Client, args []string) error {
	flags := flag.NewFlagSet("start", flag.ExitOnError)
	typeName := flags.String("type", "", "workflow type")
	payload := flags.String("payload", "{}", "JSON payload")
	key := flags.String("key", "", "idempotency key")
	priority := flags.Int("priority", 100, "lower runs earlier")
	delay := flags.Duration("delay", 0, "not claimed before now + delay")
	attempts := flags.Int("max-attempts", 0, "attempts before the run fails (0: 3)")
	count := flags.Int("n", 1, "runs to start, one after the other")
	if err := flags.Parse(args); err != nil {
		return err
	}
	var body any
	if err := json.Unmarshal([]byte(*payload), &body); err != nil {
		return fmt.Errorf("-payload: %w", err)
	}
	opts := simpleworkflow.StartOptions{
		Type: *typeName, Payload: body, IdempotencyKey: *key, Priority: priority, MaxAttempts: *attempts,
	}
	if *delay > 0 {
		opts.RunAt = time.Now().Add(*delay)
	}
	for i := 0; i < *count; i++ {
		id, created, err := client.Start(ctx, opts)
		if err != nil {
			return err
		}
		printJSON(map[string]any{"id": id, "created": created})
	}
	return nil
}

func worker(ctx context.Context, client *simpleworkflow.Client, args []string) error {
	flags := flag.NewFlagSet("worker", flag.ExitOnError)
	types := flags.String("types", "", "comma-separated types to handle")
	prefixes := flags.String("prefixes", "%", "comma-separated type prefixes")
	lease := flags.Duration("lease", 30*time.Second, "lease duration")
	id := flags.String("id", "", "worker id")
	concurrency := flags.Int("concurrency", 10, "handlers at once")
	grace := flags.Duration("grace", 10*time.Second, "shutdown grace")
	retry := flags.Duration("retry", time.Minute, "base of the quadratic backoff")
	poll := flags.Duration("poll", time.Second, "longest wait between claims without a notification")
	quiet := flags.Bool("quiet", false, "no log lines")
	waitGo := flags.Bool("wait-go", false, "after ready, claim only once a line 'go' comes on stdin")
	if err := flags.Parse(args); err != nil {
		return err
	}
	cfg := simpleworkflow.PollerConfig{
		TypePrefixes: strings.Split(*prefixes, ","), LeaseDuration: *lease, WorkerID: *id,
		Concurrency: *concurrency, ShutdownGrace: *grace, PollInterval: *poll,
	}
	if *quiet {
		cfg.Logf = func(string, ...any) {}
	}
	w, err := simpleworkflow.NewWorker(client, cfg)
	if err != nil {
		return err
	}
	workerID := w.ID()
	policy := simpleworkflow.DefaultRetry
	policy.Base = *retry
	ledger := os.Getenv("SWGO_LEDGER")
	for _, t := range strings.Split(*types, ",") {
		if err := w.Handle(t, handler(ledger, workerID), simpleworkflow.WithRetry(policy)); err != nil {
			return err
		}
	}
	ctx, stop := signal.NotifyContext(ctx, syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	fmt.Println("ready")
	if *waitGo {
		line, _ := bufio.NewReader(os.Stdin).ReadString('\n')
		if strings.TrimSpace(line) != "go" {
			return nil
		}
	}
	return w.Run(ctx)
}

type instructions struct {
	Sleep     float64         `json:"sleep"`
	Fail      int             `json:"fail"`
	Permanent bool            `json:"permanent"`
	Panic     bool            `json:"panic"`
	Result    json.RawMessage `json:"result"`
}

func handler(ledger, workerID string) simpleworkflow.Handler {
	return func(ctx context.Context, job *simpleworkflow.Job) (any, error) {
		note(ledger, "started", job, workerID, "")
		var do instructions
		_ = job.Decode(&do)
		if do.Sleep > 0 {
			select {
			case <-time.After(time.Duration(do.Sleep * float64(time.Second))):
			case <-ctx.Done():
				note(ledger, "stopped", job, workerID, job.StopReason())
				return nil, ctx.Err()
			}
		}
		switch {
		case do.Panic:
			panic("asked to")
		case do.Permanent:
			note(ledger, "finished", job, workerID, "permanent")
			return nil, simpleworkflow.Permanent(errors.New("asked to fail for good"))
		case job.Attempt <= do.Fail:
			note(ledger, "finished", job, workerID, "failed")
			return nil, fmt.Errorf("asked to fail attempt %d", job.Attempt)
		}
		note(ledger, "finished", job, workerID, "succeeded")
		if do.Result != nil {
			return do.Result, nil
		}
		return map[string]any{"echo": job.Payload, "attempt": job.Attempt, "runtime": "go"}, nil
	}
}

func note(ledger, event string, job *simpleworkflow.Job, workerID, outcome string) {
	if ledger == "" {
		return
	}
	line, _ := json.Marshal(map[string]any{
		"event": event, "run": job.ID, "type": job.Type, "worker": workerID,
		"attempt": job.Attempt, "outcome": outcome, "pid": os.Getpid(),
		"at": float64(time.Now().UnixNano()) / 1e9,
	})
	f, err := os.OpenFile(ledger, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
	if err != nil {
		return
	}
	_, _ = f.Write(append(line, '\n'))
	_ = f.Close()
}
