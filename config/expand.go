package config

import (
	"fmt"
	"strings"

	"go.yaml.in/yaml/v3"
)

// expansion is what ${...} expansion did to one scalar: which variables its value came from,
// so that no message ever quotes it, and which of them were unset with no default, so that an
// empty secret can name the variable to set.
type expansion struct {
	vars  []string // every ${NAME} of the value, in order
	unset []string // those that were unset or empty and had no ":-default"
}

// from describes where a value came from, for a message that must not quote it:
// "${A}" or "${A}, ${B}".
func (e *expansion) from() string {
	refs := make([]string, len(e.vars))
	for i, v := range e.vars {
		refs[i] = "${" + v + "}"
	}
	return strings.Join(refs, ", ")
}

// expandTree replaces ${NAME} and ${NAME:-default} with values from getenv inside every scalar
// value of a parsed YAML document, in place, and returns what it did to each scalar it changed.
//
// It runs on the parsed tree, never on the text, so a value can only ever be one scalar: a
// variable holding `a", "b` or a newline and "key: x" stays inside its string and can add no
// list item or key. Mapping keys and comments are not expanded. A plain (unquoted) scalar
// takes the type its expanded value reads as, as if written there: "${SLOTS}" with SLOTS=20 is
// the number 20, and an unset "${LISTEN}" is null, so the key takes its default.
//
// Only the exact form "${" is special: a "$" followed by anything else is kept, so a secret or
// a regular expression containing "$" needs no escaping. A "${" with no "}" on the same line is
// an error rather than literal text, because it is almost always a typo that would otherwise
// ship a broken secret or URL silently. Expansion is a single pass: a value that itself contains
// "${" is not expanded again, so the environment cannot inject more variables.
//
// Every problem is returned, one per line, each naming its line; the text is never echoed,
// since it may hold a secret.
func expandTree(root *yaml.Node, getenv func(string) string) (map[*yaml.Node]*expansion, []string) {
	done := map[*yaml.Node]*expansion{}
	var problems []string
	seen := map[*yaml.Node]bool{}
	stack := []*yaml.Node{root}
	for len(stack) > 0 {
		n := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		// An alias is expanded where its anchor stands; each node once.
		if n == nil || seen[n] || n.Kind == yaml.AliasNode {
			continue
		}
		seen[n] = true
		switch n.Kind {
		case yaml.DocumentNode, yaml.SequenceNode:
			for i := len(n.Content) - 1; i >= 0; i-- {
				stack = append(stack, n.Content[i])
			}
		case yaml.MappingNode:
			for i := len(n.Content) - 1; i >= 1; i -= 2 {
				stack = append(stack, n.Content[i]) // values only: keys are names, not settings
			}
		case yaml.ScalarNode:
			if !strings.Contains(n.Value, "${") {
				continue
			}
			line := n.Line
			if n.Style&(yaml.LiteralStyle|yaml.FoldedStyle) != 0 {
				line++ // a block scalar's text starts on the line after its indicator
			}
			value, e, p := expandValue(n.Value, line, getenv)
			problems = append(problems, p...)
			if len(e.vars) == 0 {
				continue
			}
			n.Value = value
			done[n] = e
			if n.Style&(yaml.DoubleQuotedStyle|yaml.SingleQuotedStyle|yaml.LiteralStyle|yaml.FoldedStyle|yaml.TaggedStyle) == 0 {
				n.Tag = "" // resolved again from the new value (see above)
			}
		}
	}
	return done, problems
}

// expandValue expands the references in one scalar's value; line is the line its text starts on.
func expandValue(s string, line int, getenv func(string) string) (string, *expansion, []string) {
	var (
		out      strings.Builder
		problems []string
		e        = &expansion{}
	)
	out.Grow(len(s))
	for i := 0; i < len(s); {
		c := s[i]
		if c != '$' || i+1 >= len(s) || s[i+1] != '{' {
			if c == '\n' {
				line++
			}
			out.WriteByte(c)
			i++
			continue
		}
		// The reference must close on its own line.
		end := i + 2
		for end < len(s) && s[end] != '}' && s[end] != '\n' {
			end++
		}
		if end >= len(s) || s[end] != '}' {
			problems = append(problems, fmt.Sprintf("line %d: unterminated ${ (a variable reference needs a closing })", line))
			out.WriteString(s[i:end])
			i = end
			continue
		}
		name, def, hasDefault := strings.Cut(s[i+2:end], ":-")
		if !validEnvName(name) {
			problems = append(problems, fmt.Sprintf("line %d: ${%s}: not a variable name (letters, digits and _, not starting with a digit)", line, clip([]byte(name))))
		} else {
			v := ""
			if getenv != nil {
				v = getenv(name)
			}
			e.vars = append(e.vars, name)
			// As in the shell, ":-" also replaces a variable that is set but empty: an empty
			// value is what an unset variable looks like through getenv.
			switch {
			case v == "" && hasDefault:
				v = def
			case v == "":
				e.unset = append(e.unset, name)
			}
			out.WriteString(v)
		}
		i = end + 1
	}
	return out.String(), e, problems
}

// validEnvName reports whether name is a POSIX-style variable name.
func validEnvName(name string) bool {
	if len(name) == 0 {
		return false
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		switch {
		case c == '_', 'A' <= c && c <= 'Z', 'a' <= c && c <= 'z':
		case '0' <= c && c <= '9' && i > 0:
		default:
			return false
		}
	}
	return true
}

// clip shortens text quoted in an error message so a long line cannot flood the output.
func clip(b []byte) string {
	const max = 40
	if len(b) > max {
		return string(b[:max]) + "..."
	}
	return string(b)
}
