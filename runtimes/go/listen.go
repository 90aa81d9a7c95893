package simpleworkflow

import (
	"context"
	"strconv"
	"strings"
	"time"

	"github.com/lib/pq"
)

// channel is where the store's triggers notify: 'wake <schema> <type> [<due epoch>]'
// when runs become pending, 'cancel <schema> <run id>' when a leased run is cancelled.
const channel = "simpleworkflow"

// listen turns notifications into claims and cancellations; while it cannot listen,
// the claim loop polls every PollInterval anyway.
func (w *Worker) listen(ctx context.Context) {
	listener := pq.NewListener(w.client.dsn, time.Second, 10*time.Second, nil)
	defer listener.Close()
	if err := listener.Listen(channel); err != nil {
		w.logf("simpleworkflow: LISTEN failed (%v); polling every %v", err, w.cfg.PollInterval)
	}
	mine := map[string]bool{}
	for _, t := range w.types {
		mine[t] = true
	}
	for {
		select {
		case <-ctx.Done():
			return
		case n := <-listener.Notify:
			if n == nil { // reconnected: notifications may have been missed
				w.poke()
				continue
			}
			w.notified(n.Extra, mine)
		case <-time.After(90 * time.Second):
			go func() { _ = listener.Ping() }()
		}
	}
}

func (w *Worker) notified(payload string, mine map[string]bool) {
	fields := strings.Fields(payload)
	if len(fields) < 2 || fields[1] != w.client.schema {
		return
	}
	switch {
	case fields[0] == "cancel" && len(fields) == 3:
		w.mu.Lock()
		j := w.held[fields[2]]
		w.mu.Unlock()
		if j != nil {
			w.logf("simpleworkflow: run %s was cancelled; stopping its handler", j.ID)
			j.halt(StopCancelled)
		}
	case fields[0] == "wake":
		if len(fields) >= 3 && !mine[fields[2]] {
			return
		}
		if len(fields) == 4 {
			if due, err := strconv.ParseFloat(fields[3], 64); err == nil {
				wait := time.Until(time.Unix(0, int64(due*1e9)))
				if wait > 0 {
					time.AfterFunc(wait, w.poke)
					return
				}
			}
		}
		w.poke()
	}
}
