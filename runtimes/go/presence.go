package simpleworkflow

import (
	"context"
	"encoding/json"
	"os"
)

// Version is what this runtime writes in workflow_worker.version.
const Version = "go-0.1"

// seen records the worker in workflow_worker, so that operators see idle workers too
// (simpleworkflow workers, the dashboard); a failure is logged, never fatal.
func (w *Worker) seen(ctx context.Context, starting bool) {
	host, _ := os.Hostname()
	prefixes, _ := json.Marshal(w.cfg.TypePrefixes)
	_, err := w.client.DB.ExecContext(ctx, sqlWorkerSeen, w.cfg.WorkerID, host, os.Getpid(),
		RuntimeName, string(prefixes), w.cfg.Concurrency, Version, w.cfg.LeaseDuration.Seconds(), starting)
	if err != nil && ctx.Err() == nil {
		w.logf("simpleworkflow: recording the worker's presence failed: %v", err)
	}
}

func (w *Worker) stopped() {
	if _, err := w.client.DB.Exec(sqlWorkerStopped, w.cfg.WorkerID, os.Getpid()); err != nil {
		w.logf("simpleworkflow: recording the worker's stop failed: %v", err)
	}
}
