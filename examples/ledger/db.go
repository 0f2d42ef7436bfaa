package main

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net/url"

	_ "modernc.org/sqlite" // the pure-Go SQLite driver, "sqlite"
)

// store is the ledger's SQLite database: one row per account with its
// balance, the lowest balance it ever had, how many transfers it applied,
// and the partition and offset of the last transfer applied to it.
type store struct {
	db   *sql.DB
	path string
}

const schema = `
CREATE TABLE IF NOT EXISTS accounts (
	id          TEXT PRIMARY KEY,
	balance     INTEGER NOT NULL,
	min_balance INTEGER NOT NULL, -- the lowest balance this account ever had
	applied     INTEGER NOT NULL, -- transfers applied to it
	partition   INTEGER NOT NULL, -- of the last transfer applied
	last_offset INTEGER NOT NULL  -- of the last transfer applied
);
-- Unordered mode only: the transfers applied, since a per-account offset
-- cannot tell a redelivery from a transfer overtaken by a later one.
CREATE TABLE IF NOT EXISTS applied (
	partition INTEGER NOT NULL,
	offset    INTEGER NOT NULL,
	PRIMARY KEY (partition, offset)
);`

// openStore opens (creating it if needed) the database at path, in WAL
// mode with synchronous=FULL: SQLite syncs the log at every commit, so a
// transaction Do committed is on disk before its offset may be committed
// to Kafka. (The test kills the process, not the machine.)
func openStore(path string) (*store, error) {
	dsn := "file:" + url.PathEscape(path) + "?_pragma=busy_timeout(10000)&_pragma=journal_mode(WAL)&_pragma=synchronous(FULL)"
	db, err := sql.Open("sqlite", dsn)
	if err != nil {
		return nil, fmt.Errorf("open database %s: %w", path, err)
	}
	// SQLite has one writer at a time: one connection, and every Do waits
	// for it in turn, instead of failing with SQLITE_BUSY.
	db.SetMaxOpenConns(1)
	if _, err := db.Exec(schema); err != nil {
		db.Close()
		return nil, fmt.Errorf("create tables in %s: %w", path, err)
	}
	return &store{db: db, path: path}, nil
}

func (s *store) close() error { return s.db.Close() }

// applyResult counts what one Do's transaction did.
type applyResult struct{ applied, skipped int }

// applyOrdered applies a batch in one transaction. Each account row keeps
// the offset of the last transfer applied to it, so a transfer at or below
// it is a redelivery (after a crash, Kafka delivers again what was not
// committed) and is skipped. This needs lane order: an account's
// transfers reach Do in offset order, so anything at or below its mark
// was applied. A per-partition mark would not do: lanes finish out of
// offset order, so a partition's highest applied offset says nothing of
// the other accounts' transfers below it, which may never have run.
func (s *store) applyOrdered(ctx context.Context, batch []transfer) (applyResult, error) {
	var r applyResult
	err := s.tx(ctx, func(tx *sql.Tx) error {
		for _, t := range batch {
			var last int64
			var part int32
			err := tx.QueryRowContext(ctx, `SELECT partition, last_offset FROM accounts WHERE id = ?`, t.Account).Scan(&part, &last)
			switch {
			case errors.Is(err, sql.ErrNoRows):
			case err != nil:
				return fmt.Errorf("account %s: %w", t.Account, err)
			case part == t.partition && t.offset <= last:
				r.skipped++ // applied before the crash: a redelivery
				continue
			}
			if err := upsert(ctx, tx, t); err != nil {
				return err
			}
			r.applied++
		}
		return nil
	})
	return r, err
}

// applyUnordered applies a batch in one transaction with no order to rely
// on: a transfer is recognised as applied by its own row in applied.
func (s *store) applyUnordered(ctx context.Context, batch []transfer) (applyResult, error) {
	var r applyResult
	err := s.tx(ctx, func(tx *sql.Tx) error {
		for _, t := range batch {
			res, err := tx.ExecContext(ctx, `INSERT OR IGNORE INTO applied (partition, offset) VALUES (?, ?)`, t.partition, t.offset)
			if err != nil {
				return fmt.Errorf("partition %d offset %d: %w", t.partition, t.offset, err)
			}
			if n, err := res.RowsAffected(); err != nil || n == 0 {
				r.skipped++
				continue
			}
			if err := upsert(ctx, tx, t); err != nil {
				return err
			}
			r.applied++
		}
		return nil
	})
	return r, err
}

func upsert(ctx context.Context, tx *sql.Tx, t transfer) error {
	_, err := tx.ExecContext(ctx, `
		INSERT INTO accounts (id, balance, min_balance, applied, partition, last_offset)
		VALUES (?1, ?2, min(?2, 0), 1, ?3, ?4)
		ON CONFLICT (id) DO UPDATE SET
			balance = balance + ?2,
			min_balance = min(min_balance, balance + ?2),
			applied = applied + 1,
			partition = ?3,
			last_offset = ?4`, t.Account, t.Amount, t.partition, t.offset)
	if err != nil {
		return fmt.Errorf("account %s, partition %d offset %d: %w", t.Account, t.partition, t.offset, err)
	}
	return nil
}

func (s *store) tx(ctx context.Context, fn func(*sql.Tx) error) error {
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("begin on %s: %w", s.path, err)
	}
	if err := fn(tx); err != nil {
		tx.Rollback() //nolint:errcheck // the error that matters is fn's
		return err
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("commit on %s: %w", s.path, err)
	}
	return nil
}

// account is one row of accounts.
type account struct {
	id                  string
	balance, minBalance int64
	applied             int
}

func (s *store) accounts(ctx context.Context) (map[string]account, error) {
	rows, err := s.db.QueryContext(ctx, `SELECT id, balance, min_balance, applied FROM accounts`)
	if err != nil {
		return nil, fmt.Errorf("read accounts from %s: %w", s.path, err)
	}
	defer rows.Close()
	out := map[string]account{}
	for rows.Next() {
		var a account
		if err := rows.Scan(&a.id, &a.balance, &a.minBalance, &a.applied); err != nil {
			return nil, fmt.Errorf("read accounts from %s: %w", s.path, err)
		}
		out[a.id] = a
	}
	return out, rows.Err()
}
