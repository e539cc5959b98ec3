package config

import (
	"bytes"
	"fmt"
)

// expand replaces ${NAME} and ${NAME:-default} in the raw text of a configuration file with
// values from getenv. It runs before YAML parsing so that a variable may stand anywhere a value
// can (a port inside a URL, one item of a list), which is what ops expect from shell-like syntax.
//
// Only the exact form "${" is special: a "$" followed by anything else is copied unchanged, so a
// secret or a regular expression containing "$" needs no escaping. A "${" with no "}" on the same
// line is an error rather than literal text, because it is almost always a typo that would
// otherwise ship a broken secret or URL silently. Expansion is a single pass: a value that itself
// contains "${" is not expanded again, so the environment cannot inject more variables.
//
// Every problem is returned, one per line, each naming its line; the line's text is never
// echoed, since it may hold a secret.
func expand(data []byte, getenv func(string) string) ([]byte, []string) {
	var (
		out      bytes.Buffer
		problems []string
	)
	out.Grow(len(data))
	line := 1
	for i := 0; i < len(data); {
		c := data[i]
		if c != '$' || i+1 >= len(data) || data[i+1] != '{' {
			if c == '\n' {
				line++
			}
			out.WriteByte(c)
			i++
			continue
		}
		// The reference must close on its own line: a "}" further down belongs to other YAML.
		end := i + 2
		for end < len(data) && data[end] != '}' && data[end] != '\n' {
			end++
		}
		if end >= len(data) || data[end] != '}' {
			problems = append(problems, fmt.Sprintf("line %d: unterminated ${ (a variable reference needs a closing })", line))
			// Copy the rest of the line as it is so later lines still get their line numbers.
			out.Write(data[i:end])
			i = end
			continue
		}
		name, def, hasDefault := bytes.Cut(data[i+2:end], []byte(":-"))
		if !validEnvName(name) {
			problems = append(problems, fmt.Sprintf("line %d: ${%s}: not a variable name (letters, digits and _, not starting with a digit)", line, clip(name)))
		} else {
			v := ""
			if getenv != nil {
				v = getenv(string(name))
			}
			// As in the shell, ":-" also replaces a variable that is set but empty: an empty
			// value is what an unset variable looks like through getenv.
			if v == "" && hasDefault {
				v = string(def)
			}
			out.WriteString(v)
		}
		i = end + 1
	}
	return out.Bytes(), problems
}

// validEnvName reports whether name is a POSIX-style variable name.
func validEnvName(name []byte) bool {
	if len(name) == 0 {
		return false
	}
	for i, c := range name {
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
