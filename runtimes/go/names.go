package simpleworkflow

import (
	"errors"
	"fmt"
	"regexp"
	"strings"
)

// InvalidArgument is the error of bad input: it names the field and what is allowed.
type InvalidArgument struct {
	Field   string
	Message string
}

func (e *InvalidArgument) Error() string { return e.Field + ": " + e.Message }

func invalid(field, format string, args ...any) error {
	return &InvalidArgument{Field: field, Message: fmt.Sprintf(format, args...)}
}

// ErrRunNotFound is returned by Get for a run id that names no run.
var ErrRunNotFound = errors.New("simpleworkflow: no such run")

const (
	maxTypeLength = 200
	maxAttempts   = 10000
	// RuntimeName is what this runtime writes in workflow_registry.runtime.
	RuntimeName = "go"
)

var (
	segment  = `[a-z][a-z0-9_]*`
	typeRe   = regexp.MustCompile(`^` + segment + `(?:\.` + segment + `)+\.v[0-9]+$`)
	prefixRe = regexp.MustCompile(`^(?:` + segment + `\.)*(?:` + segment + `)?%?$`)
	uuidRe   = regexp.MustCompile(`^[0-9a-fA-F]{8}-?[0-9a-fA-F]{4}-?[0-9a-fA-F]{4}-?[0-9a-fA-F]{4}-?[0-9a-fA-F]{12}$`)
)

// ValidateType checks a versioned type name: dotted lowercase segments ending in a
// version, at least two before it (content.thumbnail.v1), as the Python runtime does.
func ValidateType(name string) error {
	if len(name) > maxTypeLength {
		return invalid("type", "%d characters long; the limit is %d", len(name), maxTypeLength)
	}
	if !typeRe.MatchString(name) {
		return invalid("type", "%q is not <domain>.<subdomain>.<action>.vN: write dotted "+
			"lowercase segments ending in a version, like 'content.thumbnail.v1'", name)
	}
	return nil
}

// prefixMatches says whether a type prefix ('billing.%', 'billing.', 'billing', or a
// whole type name) selects typeName, as the Python worker's prefixes do.
func prefixMatches(prefix, typeName string) bool {
	if typeRe.MatchString(prefix) {
		return typeName == prefix
	}
	return strings.HasPrefix(typeName, prefixStem(prefix))
}

func prefixStem(prefix string) string {
	stem := strings.TrimSuffix(prefix, "%")
	if stem != "" && !strings.HasSuffix(stem, ".") && !strings.HasSuffix(prefix, "%") {
		stem += "."
	}
	return stem
}

func validatePrefix(prefix string) error {
	if !prefixRe.MatchString(prefix) {
		return invalid("TypePrefixes", "invalid type prefix %q: use a dotted lowercase "+
			"prefix such as 'billing.%%' (or '%%' for every type)", prefix)
	}
	return nil
}

func validateRunID(id string) error {
	if !uuidRe.MatchString(id) {
		return invalid("runID", "%q is not a run id: run ids are UUIDs", id)
	}
	return nil
}
