package simpleworkflow

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"time"
)

const (
	watchPause = 250 * time.Millisecond // between looks for leases about to end
	reapPause  = time.Second            // between looks for expired leases
	reapBatch  = 100
	// suspectAfter uncharged crashes beside other runs make a run a suspect.
	suspectAfter = 2
)

// margin is how long before its end a lease not renewed since is given up: a fifth of
// the lease, at least a second, never more than a quarter of it (as the Python worker).
func margin(lease time.Duration) time.Duration {
	m := lease / 5
	if m < time.Second {
		m = time.Second
	}
	if m > lease/4 {
		m = lease / 4
	}
	return m
}

// keepLeases renews the held leases every third of the lease, stops the handlers of
// runs cancelled or taken over, and fences the worker itself: a lease whose last
// confirmed renewal runs out within the margin is given up (its handler stopped).
func (w *Worker) keepLeases(ctx context.Context) {
	beat := time.NewTicker(w.cfg.LeaseDuration / 3)
	watch := time.NewTicker(watchPause)
	defer beat.Stop()
	defer watch.Stop()
	m := margin(w.cfg.LeaseDuration)
	for {
		select {
		case <-ctx.Done():
			return
		case <-watch.C:
			now := time.Now()
			for _, j := range w.heldJobs() {
				if now.After(j.lease().Add(-m)) && j.StopReason() == "" {
					w.logf("simpleworkflow: run %s: lease not renewed in time; stopping its handler", j.ID)
					j.halt(StopLeaseLost)
				}
			}
		case <-beat.C:
			if err := w.heartbeat(ctx, m); err != nil && ctx.Err() == nil {
				w.logf("simpleworkflow: heartbeat failed: %v", err)
			}
			w.seen(ctx, false)
		}
	}
}

func (w *Worker) heldJobs() []*Job {
	w.mu.Lock()
	defer w.mu.Unlock()
	jobs := make([]*Job, 0, len(w.held))
	for _, j := range w.held {
		jobs = append(jobs, j)
	}
	return jobs
}

func (w *Worker) heartbeat(ctx context.Context, m time.Duration) error {
	jobs := w.heldJobs()
	if len(jobs) == 0 {
		return nil
	}
	byID := map[string]*Job{}
	var leases []map[string]string
	for _, j := range jobs {
		if j.StopReason() != "" {
			continue
		}
		byID[j.ID] = j
		leases = append(leases, map[string]string{"id": j.ID, "token": j.token})
	}
	if len(leases) == 0 {
		return nil
	}
	encoded, _ := json.Marshal(leases)
	sent := time.Now()
	extended, err := w.ids(ctx, sqlHeartbeat, string(encoded), m.Seconds(),
		w.cfg.LeaseDuration.Seconds(), w.cfg.WorkerID)
	if err != nil {
		return err
	}
	for id := range extended {
		byID[id].renewed(sent.Add(w.cfg.LeaseDuration))
		delete(byID, id)
	}
	if len(byID) == 0 {
		return nil
	}
	// Not extended: cancelled, or no longer this worker's.
	rows, err := w.client.DB.QueryContext(ctx, sqlLeaseStates, string(encoded))
	if err != nil {
		return err
	}
	defer rows.Close()
	for rows.Next() {
		var id string
		var status sql.NullString
		var held sql.NullBool
		if err := rows.Scan(&id, &status, &held); err != nil {
			return err
		}
		j, ok := byID[id]
		if !ok {
			continue
		}
		if status.String == "cancelled" {
			w.logf("simpleworkflow: run %s was cancelled; stopping its handler", id)
			j.halt(StopCancelled)
		} else {
			w.logf("simpleworkflow: run %s: lease lost; stopping its handler", id)
			j.halt(StopLeaseLost)
		}
	}
	return rows.Err()
}

func (w *Worker) ids(ctx context.Context, statement string, args ...any) (map[string]bool, error) {
	rows, err := w.client.DB.QueryContext(ctx, statement, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	found := map[string]bool{}
	for rows.Next() {
		var id string
		if err := rows.Scan(&id); err != nil {
			return nil, err
		}
		found[id] = true
	}
	return found, rows.Err()
}

// reap recovers the expired leases of this runtime's types, whoever held them: a run
// whose worker died is due again at once, in its place, as the Python reaper does.
func (w *Worker) reap(ctx context.Context) {
	ticker := time.NewTicker(reapPause)
	defer ticker.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-ticker.C:
		}
		n, err := w.reapOnce(ctx)
		if err != nil && ctx.Err() == nil {
			w.logf("simpleworkflow: looking for expired leases failed: %v", err)
		}
		if n > 0 {
			w.logf("simpleworkflow: recovered %d runs whose lease expired", n)
			w.poke()
		}
	}
}

func (w *Worker) reapOnce(ctx context.Context) (int, error) {
	tx, err := w.client.DB.BeginTx(ctx, nil)
	if err != nil {
		return 0, err
	}
	defer func() { _ = tx.Rollback() }()
	rows, err := tx.QueryContext(ctx, sqlExpiredLeases, stringArray(w.types), RuntimeName, reapBatch)
	if err != nil {
		return 0, err
	}
	var crashes []map[string]any
	for rows.Next() {
		var c expired
		if err := rows.Scan(&c.id, &c.attempt, &c.maxAttempts, &c.leasedBy, &c.token, &c.isolate, &c.crashes); err != nil {
			rows.Close()
			return 0, err
		}
		crashes = append(crashes, c.outcome(w.cfg.WorkerID))
	}
	rows.Close()
	if err := rows.Err(); err != nil || len(crashes) == 0 {
		return 0, err
	}
	encoded, _ := json.Marshal(crashes)
	result, err := tx.ExecContext(ctx, sqlFail, string(encoded))
	if err != nil {
		return 0, err
	}
	n, _ := result.RowsAffected()
	return int(n), tx.Commit()
}

type expired struct {
	id                            string
	attempt, maxAttempts, crashes int
	leasedBy, token               sql.NullString
	isolate                       bool
}

// outcome is what an expired lease costs its run: nothing but a mark when its worker
// held others (which run killed it cannot be known); its second such crash makes it a
// suspect, claimed alone; a suspect's crash is its own, charged as a failed attempt.
func (c expired) outcome(recoveredBy string) map[string]any {
	charged := c.isolate
	crashes := c.crashes
	failures := c.attempt
	if charged {
		failures++
	} else {
		crashes++
	}
	final := charged && failures >= c.maxAttempts
	suspect := !final && (charged || crashes >= suspectAfter)
	message := fmt.Sprintf("lease expired: worker %s stopped renewing it (it crashed, was killed, or stalled)", c.leasedBy.String)
	var token any
	if c.token.Valid {
		token = c.token.String
	}
	return map[string]any{
		"id": c.id, "token": token, "final": final, "delay": 0, "error": message,
		"data": map[string]any{
			"reason": "lease_expired", "worker_id": c.leasedBy.String, "recovered_by": recoveredBy,
			"charged": charged, "crashes": crashes, "suspect": suspect,
			"error": map[string]any{"type": "LeaseExpired", "message": message},
		},
		"charged": charged, "suspect": suspect, "crashes": crashes, "keep_place": true,
	}
}
