// Package simpleworkflow is a Go runtime of simple-workflow: a producer that records
// runs in the Postgres inbox, and a worker that claims the runs of the types it
// handles, runs them, and records their outcomes beside the Python worker.
//
// It speaks to the store only through the statements of docs/schema.md ("A runtime in
// another language"), so that it is also the worked example of docs/runtimes.md: a
// runtime needs nothing but those statements, the lease and fencing rules, and the
// events they write.
//
//	client, _ := simpleworkflow.Open(dsn, "workflow")
//	id, _, _ := client.Start(ctx, simpleworkflow.StartOptions{
//	    Type: "billing.invoice.v1", Payload: map[string]any{"order": 7},
//	})
//	worker, _ := simpleworkflow.NewWorker(client, simpleworkflow.PollerConfig{
//	    TypePrefixes: []string{"billing.%"}, LeaseDuration: 30 * time.Second,
//	    WorkerID: "billing-worker-1",
//	})
//	worker.Handle("billing.invoice.v1", func(ctx context.Context, job *simpleworkflow.Job) (any, error) {
//	    return map[string]any{"sent": true}, nil
//	})
//	err := worker.Run(ctx) // until ctx ends: then a graceful stop
package simpleworkflow
