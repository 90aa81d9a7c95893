package simpleworkflow

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"math"
	"regexp"
	"strings"
	"time"

	"github.com/lib/pq"
)

// Client records runs and reads them: the producer's side. It is safe for concurrent
// use; a Worker shares its connections.
type Client struct {
	DB     *sql.DB
	dsn    string // key/value form, with search_path: also the listener's
	schema string
}

var schemaRe = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]{0,62}$`)

// Open connects to the store at dsn (a postgres:// URL or key=value pairs) whose tables
// live in schema ("workflow" by default, as the Python runtime's).
func Open(dsn, schema string) (*Client, error) {
	if schema == "" {
		schema = "workflow"
	}
	if !schemaRe.MatchString(schema) {
		return nil, invalid("schema", "%q: letters, digits and '_', starting with a letter or '_'", schema)
	}
	if strings.HasPrefix(dsn, "postgres://") || strings.HasPrefix(dsn, "postgresql://") {
		converted, err := pq.ParseURL(dsn)
		if err != nil {
			return nil, invalid("dsn", "%v", err)
		}
		dsn = converted
	}
	// binary_parameters sends each statement with its parameters in one round trip
	// (no separate prepare), which the Go runtime's parameters (text, numbers, arrays
	// as text) allow.
	dsn += " search_path=" + schema + " binary_parameters=yes"
	connector, err := pq.NewConnector(dsn)
	if err != nil {
		return nil, err
	}
	return &Client{DB: sql.OpenDB(connector), dsn: dsn, schema: schema}, nil
}

// Close closes the client's connections.
func (c *Client) Close() error { return c.DB.Close() }

// StartOptions is one run to record. Only Type is required.
type StartOptions struct {
	Type           string
	Payload        any       // encoded as JSON; nil is {}
	IdempotencyKey string    // a second Start with the same key returns the first run
	Priority       *int      // lower runs earlier; nil: 100
	RunAt          time.Time // not claimed before; zero: now
	MaxAttempts    int       // 0: 3
}

// Start records the intent to run opts.Type; it returns the run's id, and false when
// the idempotency key was already taken (the id is then that run's).
func (c *Client) Start(ctx context.Context, opts StartOptions) (string, bool, error) {
	if err := ValidateType(opts.Type); err != nil {
		return "", false, err
	}
	payload := []byte("{}")
	if opts.Payload != nil {
		encoded, err := json.Marshal(opts.Payload)
		if err != nil {
			return "", false, invalid("Payload", "not JSON: %v", err)
		}
		payload = encoded
	}
	priority := 100
	if opts.Priority != nil {
		priority = *opts.Priority
		if priority > math.MaxInt32 || priority < -math.MaxInt32 {
			return "", false, invalid("Priority", "%d is outside ±%d", priority, math.MaxInt32)
		}
	}
	attempts := opts.MaxAttempts
	if attempts == 0 {
		attempts = 3
	}
	if attempts < 1 || attempts > maxAttempts {
		return "", false, invalid("MaxAttempts", "%d: from 1 to %d", attempts, maxAttempts)
	}
	var key, runAt any
	if opts.IdempotencyKey != "" {
		key = opts.IdempotencyKey
	}
	if !opts.RunAt.IsZero() {
		runAt = opts.RunAt
	}
	var id string
	err := c.DB.QueryRowContext(ctx, sqlCreate, opts.Type, string(payload), key, priority, runAt, attempts).Scan(&id)
	if errors.Is(err, sql.ErrNoRows) && key != nil {
		err = c.DB.QueryRowContext(ctx, sqlRunByKey, key).Scan(&id)
		return id, false, err
	}
	return id, err == nil, err
}

// Cancel cancels a pending or leased run (and its unfinished child runs); its worker
// sees IsCancelled() and its context ends. False when the run had already finished.
func (c *Client) Cancel(ctx context.Context, runID, reason string) (bool, error) {
	if err := validateRunID(runID); err != nil {
		return false, err
	}
	data := map[string]any{}
	if reason != "" {
		data["reason"] = reason
	}
	encoded, _ := json.Marshal(data)
	rows, err := c.DB.QueryContext(ctx, sqlCancel, runID, string(encoded))
	if err != nil {
		return false, err
	}
	defer rows.Close()
	found := false
	for rows.Next() {
		var id string
		if err := rows.Scan(&id); err != nil {
			return false, err
		}
		found = found || strings.EqualFold(id, runID)
	}
	return found, rows.Err()
}

// Run is a run as Get reads it.
type Run struct {
	ID             string
	Type           string
	Payload        json.RawMessage
	Status         string // pending, leased, succeeded, failed, cancelled
	Priority       int
	RunAt          time.Time
	IdempotencyKey string
	Attempt        int // failed attempts so far
	MaxAttempts    int
	LeasedBy       string
	LeaseUntil     *time.Time
	LastError      string
	Result         json.RawMessage
	CreatedAt      time.Time
	UpdatedAt      time.Time
}

// Get reads a run; ErrRunNotFound when there is none.
func (c *Client) Get(ctx context.Context, runID string) (*Run, error) {
	if err := validateRunID(runID); err != nil {
		return nil, err
	}
	var r Run
	var key, leasedBy, lastError sql.NullString
	var leaseUntil sql.NullTime
	var payload, result []byte
	err := c.DB.QueryRowContext(ctx, sqlGet, runID).Scan(&r.ID, &r.Type, &payload, &r.Status,
		&r.Priority, &r.RunAt, &key, &r.Attempt, &r.MaxAttempts, &leasedBy, &leaseUntil,
		&lastError, &result, &r.CreatedAt, &r.UpdatedAt)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, ErrRunNotFound
	}
	if err != nil {
		return nil, err
	}
	r.Payload, r.Result = payload, result
	r.IdempotencyKey, r.LeasedBy, r.LastError = key.String, leasedBy.String, lastError.String
	if leaseUntil.Valid {
		r.LeaseUntil = &leaseUntil.Time
	}
	return &r, nil
}
