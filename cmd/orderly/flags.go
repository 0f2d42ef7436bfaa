package main

import (
	"errors"
	"fmt"
	"net"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/pflag"

	"github.com/orderly-go/orderly/group"
)

// Flag values check their own range when they are set, so a bad value is
// reported the same way whether it came from the command line or from an
// ORDERLY_* variable, naming where it came from (see bindEnv). Checks that
// involve two flags run after both are set, in the command's RunE.

// value is a pflag.Value of type T: parse turns the text into a T or says
// in a few words why it cannot.
type value[T any] struct {
	p      *T
	typ    string
	parse  func(string) (T, error)
	format func(T) string
}

func (v *value[T]) Set(s string) error {
	x, err := v.parse(s)
	if err != nil {
		return err
	}
	*v.p = x
	return nil
}

func (v *value[T]) String() string { return v.format(*v.p) }
func (v *value[T]) Type() string   { return v.typ }

// define registers v as --name with default def.
func define[T any](fs *pflag.FlagSet, v *value[T], name string, def T, usage string) {
	*v.p = def
	fs.Var(v, name, usage)
}

// intVar defines an int flag whose values must lie in [lo, hi].
func intVar(fs *pflag.FlagSet, p *int, name string, def, lo, hi int, usage string) {
	define(fs, &value[int]{p: p, typ: "int", format: strconv.Itoa, parse: func(s string) (int, error) {
		n, err := strconv.Atoi(strings.TrimSpace(s))
		switch {
		case errors.Is(err, strconv.ErrRange):
			return 0, errors.New("out of range")
		case err != nil:
			return 0, errors.New("not an integer")
		}
		return n, inRange(n, lo, hi)
	}}, name, def, usage)
}

// inRange says why n is outside [lo, hi], in the words a user expects for
// the common bounds.
func inRange[N int | float64 | time.Duration](n, lo, hi N) error {
	const most = 1<<63 - 1
	switch {
	case n >= lo && n <= hi:
		return nil
	case lo == 0 && float64(hi) >= most:
		return errors.New("must not be negative")
	case lo == 1 && float64(hi) >= most:
		return errors.New("must be positive")
	case float64(hi) >= most:
		return fmt.Errorf("must be at least %v", lo)
	}
	return fmt.Errorf("must be between %v and %v", lo, hi)
}

// uint64Var defines an unsigned integer flag.
func uint64Var(fs *pflag.FlagSet, p *uint64, name string, def uint64, usage string) {
	define(fs, &value[uint64]{p: p, typ: "uint", parse: func(s string) (uint64, error) {
		n, err := strconv.ParseUint(strings.TrimSpace(s), 10, 64)
		if err != nil {
			return 0, errors.New("not an unsigned integer")
		}
		return n, nil
	}, format: func(n uint64) string { return strconv.FormatUint(n, 10) }}, name, def, usage)
}

// floatVar defines a float flag whose values must pass check.
func floatVar(fs *pflag.FlagSet, p *float64, name string, def float64, check func(float64) error, usage string) {
	define(fs, &value[float64]{p: p, typ: "float", parse: func(s string) (float64, error) {
		f, err := strconv.ParseFloat(strings.TrimSpace(s), 64)
		if err != nil {
			return 0, errors.New("not a number")
		}
		return f, check(f)
	}, format: func(f float64) string { return strconv.FormatFloat(f, 'g', -1, 64) }}, name, def, usage)
}

// nonNegative is a floatVar check.
func nonNegative(f float64) error { return inRange(f, 0, 1<<63) }

// fraction is a floatVar check for a share in [0, 1).
func fraction(f float64) error {
	if f >= 0 && f < 1 {
		return nil
	}
	return errors.New("must be at least 0 and below 1")
}

// durationVar defines a duration flag whose values must be at least lo
// (and above 0 if lo is 1ns).
func durationVar(fs *pflag.FlagSet, p *time.Duration, name string, def, lo time.Duration, usage string) {
	define(fs, &value[time.Duration]{p: p, typ: "duration", format: time.Duration.String, parse: func(s string) (time.Duration, error) {
		d, err := time.ParseDuration(strings.TrimSpace(s))
		if err != nil {
			return 0, errors.New("not a duration (e.g. 500ms, 2s, 1m30s)")
		}
		return d, inRange(d, lo, 1<<63-1)
	}}, name, def, usage)
}

// stringVar defines a string flag; check, if not nil, vets every value.
func stringVar(fs *pflag.FlagSet, p *string, name, def string, check func(string) error, usage string) {
	define(fs, &value[string]{p: p, typ: "string", format: func(s string) string { return s }, parse: func(s string) (string, error) {
		if check == nil {
			return s, nil
		}
		return s, check(s)
	}}, name, def, usage)
}

// nonEmpty is a stringVar check.
func nonEmpty(s string) error {
	if strings.TrimSpace(s) == "" {
		return errors.New("must not be empty")
	}
	return nil
}

// oneOf returns a stringVar check that accepts only the given words.
func oneOf(words ...string) func(string) error {
	named := slices.DeleteFunc(slices.Clone(words), func(w string) bool { return w == "" })
	msg := "must be one of " + strings.Join(named, ", ")
	if len(named) < len(words) {
		msg += ", or empty"
	}
	return func(s string) error {
		if slices.Contains(words, s) {
			return nil
		}
		return errors.New(msg)
	}
}

// hostPort is a stringVar check for a listen address: host:port with a
// host and a port in 0-65535 (0: any free port).
func hostPort(s string) error {
	host, port, err := net.SplitHostPort(s)
	if err != nil {
		return errors.New("must be host:port (e.g. 127.0.0.1:9092)")
	}
	if n, err := strconv.Atoi(port); err != nil || n < 0 || n > 65535 {
		return errors.New("port must be a number in 0-65535")
	}
	if host == "" {
		return errors.New("must name a host (e.g. 127.0.0.1" + s + ")")
	}
	return nil
}

// listVar defines a comma-separated list flag: spaces around entries are
// trimmed, "" is the empty list (an error if required), an empty entry
// ("a,,b") is an error, and check, if not nil, vets every entry.
func listVar(fs *pflag.FlagSet, p *[]string, name string, def []string, required bool, check func(string) error, usage string) {
	define(fs, &value[[]string]{p: p, typ: "list", format: func(l []string) string { return strings.Join(l, ",") }, parse: func(s string) ([]string, error) {
		l, err := splitList(s, check)
		if err == nil && required && len(l) == 0 {
			err = errors.New("must name at least one")
		}
		return l, err
	}}, name, def, usage)
}

func splitList(s string, check func(string) error) ([]string, error) {
	if strings.TrimSpace(s) == "" {
		return nil, nil
	}
	var out []string
	for f := range strings.SplitSeq(s, ",") {
		if f = strings.TrimSpace(f); f == "" {
			return nil, errors.New("empty entry")
		}
		if check != nil {
			if err := check(f); err != nil {
				if f == strings.TrimSpace(s) {
					return nil, err
				}
				return nil, fmt.Errorf("%q: %w", f, err)
			}
		}
		if slices.Contains(out, f) {
			return nil, fmt.Errorf("%q is listed twice", f)
		}
		out = append(out, f)
	}
	return out, nil
}

// intListVar defines a comma-separated list of integers in [lo, hi].
func intListVar(fs *pflag.FlagSet, p *[]int, name string, def []int, lo, hi int, usage string) {
	define(fs, &value[[]int]{p: p, typ: "ints", format: joinInts, parse: func(s string) ([]int, error) {
		fields, err := splitList(s, nil)
		if err != nil {
			return nil, err
		}
		out := make([]int, len(fields))
		for i, f := range fields {
			if out[i], err = strconv.Atoi(f); err != nil {
				return nil, fmt.Errorf("%q is not an integer", f)
			}
			if err := inRange(out[i], lo, hi); err != nil {
				if len(fields) == 1 {
					return nil, err
				}
				return nil, fmt.Errorf("%d: %w", out[i], err)
			}
			if slices.Contains(out[:i], out[i]) {
				return nil, fmt.Errorf("%d is listed twice", out[i])
			}
		}
		return out, nil
	}}, name, def, usage)
}

func joinInts(ns []int) string {
	s := make([]string, len(ns))
	for i, n := range ns {
		s[i] = strconv.Itoa(n)
	}
	return strings.Join(s, ",")
}

// batchSlotsError is the usage error of --num and --size whose product
// group.New would refuse (Config.Num*Size above group.MaxBatchSlots),
// naming the flags rather than the Config fields.
func batchSlotsError(fs *pflag.FlagSet, num, size int) error {
	return usagef("%s with %s: --num times --size must be at most %d (each worker holds a batch of --size)",
		flagArg(fs, "num", num), flagArg(fs, "size", size), group.MaxBatchSlots)
}
