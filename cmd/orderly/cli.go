package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

// The command-line convention, shared by every subcommand:
//
//   - `orderly --help` lists the subcommands, `orderly CMD --help` prints
//     CMD's help; both to stdout, exit 0, under the same "Usage:" header.
//   - A usage error (unknown command or flag, bad or missing value,
//     unexpected argument, bad ORDERLY_* variable) is one line naming the
//     flag and the value, then "see 'orderly CMD --help'", on stderr,
//     exit 2. A value that came from a variable is named with it
//     (flagArg, flagSource): nothing on the command line says the flag.
//   - Any other error is one line on stderr, exit 1; an interrupted run
//     (SIGINT, SIGTERM, --timeout) exits 3 after its report; a consume
//     whose --instance-id another process holds (group.ErrInstanceFenced)
//     exits 4, so that a supervisor can be told not to restart it.
//   - Every flag can also be set as ORDERLY_<FLAG> (bindEnv); a flag on the
//     command line wins.
//
// A new subcommand is a func returning a *cobra.Command built by
// newCommand, added in newRoot: it inherits all of the above.

// exit codes.
const (
	exitOK          = 0
	exitError       = 1
	exitUsage       = 2
	exitInterrupted = 3
	exitFenced      = 4 // consume's static member fenced: restarting it would fence the holder in turn
)

const envPrefix = "ORDERLY_"

// helpFooter ends every command's help: the environment rule, then the
// exit status, which names --timeout only for a command that has one.
const helpFooter = "\n" + helpEnvironment + "\n" + helpExitStatusChoice

const helpEnvironment = `Environment: every flag can also be set as ` + envPrefix + `<FLAG>, the flag's name in
upper case with - as _ (--max-in-flight: ` + envPrefix + `MAX_IN_FLIGHT); a flag given on
the command line wins, an empty variable counts as unset.
`

const helpExitStatusChoice = `{{if .LocalFlags.Lookup "timeout"}}` + helpExitStatusTimeout + `{{else}}` + helpExitStatus + `{{end}}`

// The exit status of a command that ends on its own. A signal or --timeout
// cut its run short: exit 3.
const (
	helpExitStatus = `Exit status: 0 done; 1 error, or a failed check; 2 usage error; 3 interrupted
(SIGINT or SIGTERM) before the run finished. A second SIGINT or SIGTERM
kills the process at once (a shell shows 130 or 143).
`
	helpExitStatusTimeout = `Exit status: 0 done; 1 error, or a failed check; 2 usage error; 3 interrupted
(SIGINT, SIGTERM or --timeout) before the run finished. A second SIGINT or
SIGTERM kills the process at once (a shell shows 130 or 143).
`
)

// withExitStatus sets c's help to the common one with its own exit status
// (a command with no planned end, which a signal stops: exit 0).
func withExitStatus(c *cobra.Command, status string) {
	c.SetHelpTemplate(strings.Replace(helpTemplate, helpExitStatusChoice, status, 1))
}

// helpTemplate is cobra's help, with the usage line first so that every
// command's help starts the same way.
const helpTemplate = `Usage: {{.UseLine}}

{{with (or .Long .Short)}}{{. | trimTrailingWhitespaces}}{{end}}
{{- if .HasAvailableSubCommands}}

Commands:{{range .Commands}}{{if .IsAvailableCommand}}
  {{rpad .Name .NamePadding}} {{.Short}}{{end}}{{end}}

Run '{{.CommandPath}} <command> --help' for a command's flags.{{end}}
{{- if .HasAvailableLocalFlags}}

Flags:
{{.LocalFlags.FlagUsages | trimTrailingWhitespaces}}{{end}}
` + helpFooter

// usageError is a mistake on the command line or in the environment:
// main prints it and the hint (to see the command's help), exit 2.
type usageError struct{ msg, hint string }

func (e *usageError) Error() string { return e.msg }

func usagef(format string, args ...any) error {
	return &usageError{msg: fmt.Sprintf(format, args...)}
}

// badValue is the usage error of a flag whose value (from the command line
// or from its variable, source) was rejected.
func badValue(source, value string, why error) error {
	return usagef("invalid value %q for %s: %v", value, source, why)
}

// interruptedError is the error of a run that a signal or --timeout ended
// before it finished: exit 3.
type interruptedError struct{ msg string }

func (e *interruptedError) Error() string { return e.msg }

// untilInterrupted runs fn, which cannot be cancelled (a sarama client
// dialling a broker, or asking one that does not answer), and returns its
// result, or the interrupted error (exit 3) as soon as ctx ends; fn then
// goes on in the background, and drop (if not nil) gets its result, so
// that a client it made is closed. The process exits soon after.
func untilInterrupted[T any](ctx context.Context, what string, fn func() (T, error), drop func(T)) (T, error) {
	type result struct {
		v   T
		err error
	}
	done := make(chan result, 1)
	go func() {
		v, err := fn()
		done <- result{v, err}
	}()
	select {
	case r := <-done:
		return r.v, r.err
	case <-ctx.Done():
		go func() {
			if r := <-done; r.err == nil && drop != nil {
				drop(r.v)
			}
		}()
		var zero T
		return zero, &interruptedError{msg: fmt.Sprintf("%v while %s", context.Cause(ctx), what)}
	}
}

// runFailed wraps the error a command's run returns, so that run can tell
// it apart from cobra's errors about the command line, which are all
// usage errors.
type runFailed struct{ err error }

func (e *runFailed) Error() string { return e.err.Error() }
func (e *runFailed) Unwrap() error { return e.err }

// env is what a run reads from outside its arguments.
type env struct {
	stdout, stderr io.Writer
	lookup         func(string) (string, bool) // os.LookupEnv, or a test's
}

// newCommand builds a subcommand under the convention: no positional
// arguments, flags listed in the order defined, and run's errors passed
// on as what they are (see run), not as usage errors.
func newCommand(use, short, long string, run func(ctx context.Context) error) *cobra.Command {
	c := &cobra.Command{
		Use:   use,
		Short: short,
		Long:  long,
		Args:  noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := run(cmd.Context()); err != nil {
				return &runFailed{err: err}
			}
			return nil
		},
	}
	c.Flags().SortFlags = false
	return c
}

// commandLine is cmd's command line as given: the flags set on it or by
// their variables, in the order defined, so that a report can say how to
// run it again.
func commandLine(cmd *cobra.Command) string {
	args := []string{cmd.CommandPath()}
	cmd.Flags().VisitAll(func(f *pflag.Flag) {
		if !f.Changed {
			return
		}
		v := f.Value.String()
		switch {
		case f.Value.Type() == "bool" && v == "true":
			args = append(args, "--"+f.Name)
			return
		case v == "" || strings.ContainsAny(v, " \t\"'\\$"):
			v = strconv.Quote(v)
		}
		args = append(args, "--"+f.Name, v)
	})
	return strings.Join(args, " ")
}

// noArgs rejects positional arguments; on a command with subcommands the
// first one is a mistyped command.
func noArgs(cmd *cobra.Command, args []string) error {
	if len(args) == 0 {
		return nil
	}
	if cmd.HasAvailableSubCommands() {
		hint := ""
		if s := cmd.SuggestionsFor(args[0]); len(s) > 0 {
			hint = fmt.Sprintf(" (did you mean %q?)", s[0])
		}
		return usagef("unknown command %q%s", args[0], hint)
	}
	return usagef("unexpected argument %q (%s takes only flags)", args[0], cmd.CommandPath())
}

// newRoot is the orderly command tree. Without a subcommand it runs the
// demo, with the demo's flags.
func newRoot(e env) *cobra.Command {
	root := demoCommand(e)
	root.Use = "orderly [command] [flags]"
	root.Short = "Ordered parallelism for Kafka consumers: demo, broker, benchmarks"
	root.Long = `Orderly consumes Kafka with many goroutines per partition, in order per key,
committing only behind finished work. Without a command, orderly runs the demo.`
	root.SilenceErrors = true // run prints errors, one line each
	root.SilenceUsage = true  // a usage error is one line and a hint, not the whole help
	root.SetHelpTemplate(helpTemplate)
	root.SetFlagErrorFunc(flagError)
	root.SuggestionsMinimumDistance = 2
	root.SetHelpCommand(helpCommand(root))
	root.PersistentPreRunE = func(cmd *cobra.Command, _ []string) error {
		return bindEnv(cmd.Flags(), e.lookup)
	}
	root.AddCommand(demoCommand(e), brokerCommand(e), benchCommand(e), dlqCommand(e), consumeCommand(e))
	root.AddCommand(groupCommand(e))
	return root
}

// helpCommand is `orderly help [command]`: the command's help, as with
// --help; naming an unknown command is a usage error.
func helpCommand(root *cobra.Command) *cobra.Command {
	return &cobra.Command{
		Use:   "help [command]",
		Short: "print a command's help, as --help does",
		RunE: func(_ *cobra.Command, args []string) error {
			cmd, rest, err := root.Find(args)
			if err == nil {
				err = noArgs(cmd, rest)
			}
			if err != nil {
				return err
			}
			return cmd.Help()
		},
	}
}

// flagError turns pflag's parse errors into one-line usage errors that
// name the flag and the value.
func flagError(cmd *cobra.Command, err error) error {
	var (
		invalid  *pflag.InvalidValueError
		notExist *pflag.NotExistError
		needs    *pflag.ValueRequiredError
	)
	switch {
	case errors.As(err, &invalid):
		return badValue("--"+invalid.GetFlag().Name, invalid.GetValue(), invalid.Unwrap())
	case errors.As(err, &needs):
		return usagef("flag --%s needs a value", needs.GetFlag().Name)
	case errors.As(err, &notExist):
		// pflag reads -messages as the shorthands -m -e -s ...: say so
		// when a long flag of that name exists.
		if s := notExist.GetSpecifiedShortnames(); s != "" {
			if cmd.Flags().Lookup(s) != nil {
				return usagef("unknown flag -%s (long flags take two dashes: --%s)", s, s)
			}
			return usagef("unknown flag -%s", s)
		}
		return usagef("unknown flag --%s", notExist.GetSpecifiedName())
	}
	return &usageError{msg: err.Error()}
}

// envName is the environment variable of a flag: ORDERLY_ and the name in
// upper case, - as _.
func envName(flag string) string {
	return envPrefix + strings.ToUpper(strings.ReplaceAll(flag, "-", "_"))
}

// bindEnv sets every flag not given on the command line from its
// variable, if that is set and not empty. A value the flag rejects is a
// usage error naming the variable.
func bindEnv(fs *pflag.FlagSet, lookup func(string) (string, bool)) error {
	var err error
	fs.VisitAll(func(f *pflag.Flag) {
		if err != nil || f.Changed || f.Name == "help" {
			return
		}
		name := envName(f.Name)
		v, ok := lookup(name)
		if !ok || v == "" {
			return
		}
		if serr := f.Value.Set(v); serr != nil {
			err = badValue(envSource(name, f.Name), v, serr)
			return
		}
		f.Changed = true
		if f.Annotations == nil {
			f.Annotations = map[string][]string{}
		}
		f.Annotations[fromEnv] = []string{name}
	})
	return err
}

// fromEnv is the annotation bindEnv puts on a flag it set from its
// variable: the variable's name.
const fromEnv = "orderly.from-env"

// envVar is the variable that set flag name of fs, "" if none did (fs
// nil: a test's options, built without flags).
func envVar(fs *pflag.FlagSet, name string) string {
	if fs == nil {
		return ""
	}
	if f := fs.Lookup(name); f != nil && len(f.Annotations[fromEnv]) > 0 {
		return f.Annotations[fromEnv][0]
	}
	return ""
}

// flagArg is how an error names flag name of fs, and its value if given:
// "--topic orders", or "--topic orders (from ORDERLY_TOPIC)" when the
// value came from the variable, since nothing on the command line then
// says --topic. Every usage error that names a flag that was set goes
// through it (or flagSource).
func flagArg(fs *pflag.FlagSet, name string, value ...any) string {
	s := "--" + name
	for _, v := range value {
		s += fmt.Sprintf(" %v", v)
	}
	if v := envVar(fs, name); v != "" {
		s += " (from " + v + ")"
	}
	return s
}

// flagSource is what badValue names as the source of flag name's value:
// "--name", or "ORDERLY_NAME (--name)" when it came from the variable, as
// bindEnv names a value the flag itself refused.
func flagSource(fs *pflag.FlagSet, name string) string {
	if v := envVar(fs, name); v != "" {
		return envSource(v, name)
	}
	return "--" + name
}

func envSource(variable, flag string) string { return fmt.Sprintf("%s (--%s)", variable, flag) }

// run runs the command line args. Its error is a *usageError (with the
// hint set), an *interruptedError, or any other error.
func run(ctx context.Context, args []string, e env) error {
	root := newRoot(e)
	root.SetArgs(args)
	root.SetOut(e.stdout)
	root.SetErr(e.stderr)
	cmd, err := root.ExecuteContextC(ctx)
	var (
		failed *runFailed
		usage  *usageError
	)
	switch {
	case err == nil:
		return nil
	case errors.As(err, &failed) && !errors.As(failed.err, &usage):
		return failed.err
	case !errors.As(err, &usage):
		// Whatever else cobra rejects is about the command line too.
		usage = &usageError{msg: err.Error()}
	}
	if cmd.Name() == "help" && cmd.HasParent() { // `orderly help nosuch`
		cmd = cmd.Parent()
	}
	usage.hint = fmt.Sprintf("see '%s --help'", cmd.CommandPath())
	return usage
}
