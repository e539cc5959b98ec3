package pgstore

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/payrouter/payrouter"
)

// TestIsUnavailable: what the database could not do is told apart from what it answered.
func TestIsUnavailable(t *testing.T) {
	tests := []struct {
		name string
		err  error
		want bool
	}{
		{"nil", nil, false},
		{"deadline", fmt.Errorf("query: %w", context.DeadlineExceeded), true},
		{"cancelled by the caller", fmt.Errorf("query: %w", context.Canceled), false},
		{"admin shutdown", &pgconn.PgError{Code: "57P01"}, true},
		{"crash shutdown", &pgconn.PgError{Code: "57P02"}, true},
		{"starting up", &pgconn.PgError{Code: "57P03"}, true},
		{"connection failure", &pgconn.PgError{Code: "08006"}, true},
		{"too many connections", &pgconn.PgError{Code: "53300"}, true},
		{"read-only standby", &pgconn.PgError{Code: "25006"}, true},
		{"statement timeout", &pgconn.PgError{Code: "57014"}, true},
		{"unique violation", &pgconn.PgError{Code: "23505"}, false},
		{"syntax error", &pgconn.PgError{Code: "42601"}, false},
		{"not found", payrouter.ErrNotFound, false},
		{"hold lost", fmt.Errorf("x: %w", payrouter.ErrHoldLost), false},
		{"already wrapped", fmt.Errorf("x: %w", payrouter.ErrStateUnavailable), true},
		{"other", errors.New("boom"), false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := IsUnavailable(tc.err); got != tc.want {
				t.Fatalf("IsUnavailable(%v) = %v, want %v", tc.err, got, tc.want)
			}
		})
	}
}
