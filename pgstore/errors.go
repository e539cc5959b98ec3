package pgstore

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"strings"
	"syscall"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/payrouter/payrouter"
)

// IsUnavailable reports whether err means the database could not be reached or did not answer
// in time, as opposed to an answer about the data (not found, a mismatch, a hold lost, a
// constraint): a connection refused, reset or closed under the call; a deadline run out,
// waiting for a pooled connection included; the server shutting down, starting up or out of
// connections (SQLSTATE 57P01-57P03, 53xxx); any connection exception (08xxx); a standby that
// refuses writes while a failover settles (25006). Every error a Store returns for such a cause
// already wraps payrouter.ErrStateUnavailable; IsUnavailable also classifies pgx's own errors.
// A context cancelled by the caller is not unavailability: the caller gave up.
func IsUnavailable(err error) bool {
	if err == nil {
		return false
	}
	if errors.Is(err, payrouter.ErrStateUnavailable) {
		return true
	}
	if errors.Is(err, context.Canceled) && !pgconn.Timeout(err) {
		return false
	}
	// Before the server's codes: a connection attempt refused with any code (a server starting
	// up, a full connection table, a rejected login) is a database this instance cannot use.
	var connect *pgconn.ConnectError
	if errors.As(err, &connect) {
		return true
	}
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		return unavailableCode(pgErr.Code)
	}
	if pgconn.Timeout(err) || errors.Is(err, context.DeadlineExceeded) {
		return true
	}
	var netErr net.Error
	if errors.As(err, &netErr) {
		return true
	}
	for _, target := range []error{pgconn.ErrConnClosed, io.EOF, io.ErrUnexpectedEOF,
		syscall.ECONNREFUSED, syscall.ECONNRESET, syscall.EPIPE, net.ErrClosed} {
		if errors.Is(err, target) {
			return true
		}
	}
	return false
}

// connectionLost reports whether err says the connection itself is gone (the server shut down
// or restarted, the connection was reset or closed, a connection exception), as opposed to a
// slow answer: a timeout leaves the pool as it is, since reconnecting everything under load
// would only add to it.
func connectionLost(err error) bool {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		return strings.HasPrefix(pgErr.Code, "08") || pgErr.Code == "57P01" || pgErr.Code == "57P02" || pgErr.Code == "57P03"
	}
	for _, target := range []error{pgconn.ErrConnClosed, io.EOF, io.ErrUnexpectedEOF, syscall.ECONNRESET, syscall.EPIPE, net.ErrClosed} {
		if errors.Is(err, target) {
			return true
		}
	}
	return false
}

// unavailableCode reports whether a SQLSTATE says the server cannot serve now rather than
// something about the statement or its data.
func unavailableCode(code string) bool {
	switch {
	case strings.HasPrefix(code, "08"): // connection exception
		return true
	case strings.HasPrefix(code, "53"): // insufficient resources: too many connections, disk full
		return true
	case strings.HasPrefix(code, "58"): // system error: I/O error at the server
		return true
	}
	switch code {
	case "57P01", "57P02", "57P03": // admin shutdown, crash shutdown, cannot connect now
		return true
	case "57014": // query cancelled: a statement_timeout ran out
		return true
	case "55P03": // lock not available: a lock_timeout ran out
		return true
	case "25006": // read-only transaction: connected to a standby during a failover
		return true
	}
	return false
}

// fail wraps err from the call described by what ("claim \"key\""), adding
// payrouter.ErrStateUnavailable and the database it could not use when err says so.
func (s *Store) fail(what string, err error) error {
	if connectionLost(err) {
		// The server restarted or the network dropped: every pooled connection is as dead as
		// this one, and each would fail one more request once the database is back. Closing
		// them all now makes the next call connect afresh.
		s.pool.Reset()
	}
	if IsUnavailable(err) {
		return fmt.Errorf("pgstore: %s: %w (%s): %w", what, payrouter.ErrStateUnavailable, s.where, err)
	}
	return fmt.Errorf("pgstore: %s: %w", what, err)
}

// failChange is fail for a transition's write: a deadlock or serialization failure (40P01,
// 40001: two writers of one charge and one refund that locked them in the other order) wrote
// nothing and is payrouter.ErrStale, so that the caller reads again and decides anew.
func (s *Store) failChange(what string, err error) error {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && (pgErr.Code == "40P01" || pgErr.Code == "40001") {
		return fmt.Errorf("pgstore: %s: %w (%s)", what, payrouter.ErrStale, pgErr.Code)
	}
	return s.fail(what, err)
}

// scrub removes the password of the URL raw from msg, in case an error quoted the URL.
func scrub(msg, raw string) string {
	u, err := url.Parse(raw)
	if err != nil || u.User == nil {
		return msg
	}
	if pw, ok := u.User.Password(); ok && pw != "" {
		msg = strings.ReplaceAll(msg, pw, "xxxxx")
	}
	return msg
}
