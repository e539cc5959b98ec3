package config

import (
	"slices"
	"testing"
)

func TestExpand(t *testing.T) {
	env := map[string]string{"HOST": "db.internal", "PORT": "6379", "EMPTY": "", "DOLLAR": "${HOST}"}
	getenv := func(k string) string { return env[k] }

	tests := []struct {
		name     string
		in       string
		want     string
		problems []string
	}{
		{name: "set", in: "a: ${HOST}", want: "a: db.internal"},
		{name: "inside a value", in: "url: redis://${HOST}:${PORT}/0", want: "url: redis://db.internal:6379/0"},
		{name: "default used when unset", in: "a: ${NOPE:-fallback}", want: "a: fallback"},
		{name: "default used when empty", in: "a: ${EMPTY:-fallback}", want: "a: fallback"},
		{name: "default ignored when set", in: "a: ${HOST:-fallback}", want: "a: db.internal"},
		{name: "empty default", in: `a: "${NOPE:-}"`, want: `a: ""`},
		{name: "default with colon and slashes", in: "a: ${NOPE:-http://127.0.0.1:9101}", want: "a: http://127.0.0.1:9101"},
		{name: "missing variable is empty", in: "a: '${NOPE}'", want: "a: ''"},
		{name: "dollar alone untouched", in: "a: pa$$word$", want: "a: pa$$word$"},
		{name: "dollar before a name untouched", in: "a: $HOST and $(cmd) and ^x$", want: "a: $HOST and $(cmd) and ^x$"},
		{name: "value is not expanded again", in: "a: ${DOLLAR}", want: "a: ${HOST}"},
		{name: "comments are text too", in: "# ${HOST}\na: 1", want: "# db.internal\na: 1"},
		{name: "dollar at the end", in: "a: $", want: "a: $"},
		{
			name:     "unterminated names its line",
			in:       "a: 1\nb: ${HOST\nc: 2",
			problems: []string{"line 2: unterminated ${ (a variable reference needs a closing })"},
		},
		{
			name:     "unterminated at end of input",
			in:       "a: ${",
			problems: []string{"line 1: unterminated ${ (a variable reference needs a closing })"},
		},
		{
			name: "every problem is reported",
			in:   "a: ${X\nb: ${}\nc: ${1X}\nd: ${A B}",
			problems: []string{
				"line 1: unterminated ${ (a variable reference needs a closing })",
				"line 2: ${}: not a variable name (letters, digits and _, not starting with a digit)",
				"line 3: ${1X}: not a variable name (letters, digits and _, not starting with a digit)",
				"line 4: ${A B}: not a variable name (letters, digits and _, not starting with a digit)",
			},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, problems := expand([]byte(tc.in), getenv)
			if !slices.Equal(problems, tc.problems) {
				t.Fatalf("expand(%q) problems = %q, want %q", tc.in, problems, tc.problems)
			}
			if tc.problems == nil && string(got) != tc.want {
				t.Errorf("expand(%q) = %q, want %q", tc.in, got, tc.want)
			}
		})
	}
}

func TestExpandNilGetenv(t *testing.T) {
	got, problems := expand([]byte("a: ${X:-d} ${Y}."), nil)
	if problems != nil || string(got) != "a: d ." {
		t.Errorf("expand with nil getenv = %q, %q; want %q and no problems", got, problems, "a: d .")
	}
}
