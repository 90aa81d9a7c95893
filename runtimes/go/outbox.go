package simpleworkflow

import (
	"encoding/json"
	"time"
)

// maxBatch is the most outcomes one statement records.
const maxBatch = 500

// outcome is one attempt's end, waiting in the outbox.
type outcome struct {
	job       *Job
	statement string // sqlSucceed, sqlFail or sqlRelease
	item      map[string]any
	done      chan struct{}
}

// outbox records outcomes a batch at a time: while one statement runs, the outcomes
// that finish meanwhile queue, and the next statement records them all. Each
// statement's items are fenced one by one by their lease tokens, so a batch is as safe
// as one outcome at a time, at a fraction of the commits.
func (w *Worker) outbox() {
	for {
		var batch []outcome
		select {
		case first := <-w.outcomes:
			batch = append(batch, first)
		case <-w.closed:
			return
		}
	collect:
		for len(batch) < maxBatch {
			select {
			case more := <-w.outcomes:
				batch = append(batch, more)
			default:
				break collect
			}
		}
		w.flush(batch)
	}
}

func (w *Worker) flush(batch []outcome) {
	by := map[string][]outcome{}
	for _, o := range batch {
		by[o.statement] = append(by[o.statement], o)
	}
	for statement, group := range by {
		items := make([]map[string]any, len(group))
		for i, o := range group {
			items[i] = o.item
		}
		encoded, _ := json.Marshal(items)
		args := []any{string(encoded)}
		if statement == sqlRelease {
			args = append(args, w.cfg.WorkerID, StopShutdown)
		}
		if _, err := w.client.DB.Exec(statement, args...); err != nil {
			// one by one, each trying again while its lease holds
			for _, o := range group {
				one, _ := json.Marshal([]map[string]any{o.item})
				w.record(o.job, statement, append([]any{string(one)}, args[1:]...)...)
			}
		}
		for _, o := range group {
			close(o.done)
		}
	}
}

// send hands an outcome to the outbox and waits until it is recorded (or given up).
// A handler that returns after Run did (it outlived the stop) records nothing: its run
// stays leased until the lease runs out, and a reaper gives it to another worker.
func (w *Worker) send(j *Job, statement string, item map[string]any) {
	o := outcome{job: j, statement: statement, item: item, done: make(chan struct{})}
	select {
	case w.outcomes <- o:
	case <-w.closed:
		return
	}
	select {
	case <-o.done:
	case <-w.closed:
	}
}

// record sends one outcome, trying again while the store is unreachable and the lease
// still holds: after that, the reaper of some worker recovers the run.
func (w *Worker) record(j *Job, statement string, args ...any) {
	for pause := 100 * time.Millisecond; ; pause *= 2 {
		_, err := w.client.DB.Exec(statement, args...)
		if err == nil {
			return
		}
		if time.Now().Add(pause).After(j.lease()) {
			w.logf("simpleworkflow: run %s: recording its outcome failed, its lease ends: %v", j.ID, err)
			return
		}
		w.logf("simpleworkflow: run %s: recording its outcome failed (%v); trying again", j.ID, err)
		time.Sleep(pause)
	}
}
