package compose

import (
	"fmt"
	"os"
	"regexp"
	"sort"
	"strings"
	"testing"

	"github.com/ferryhq/ferry/platform/config"
)

const configDocPath = "../docs/configuration.md"

// emptyDefault is how docs/configuration.md writes a variable with no default.
const emptyDefault = "—"

// docRow is one row of a variable table in docs/configuration.md:
//
//	| `NAME` | `default` or — | read by | meaning |
type docRow struct {
	line                       int
	name, def, readBy, meaning string
}

var (
	docRowStart = regexp.MustCompile("^\\|\\s*`([A-Z][A-Z0-9_]*)`\\s*\\|")
	// A variable name anywhere in the document; FERRY_* and OTEL_* as a
	// family name (with the star) are not variable names.
	docVarName = regexp.MustCompile(`\b(?:FERRY|OTEL)_[A-Z0-9_]*[A-Z0-9]\b`)
)

func parseConfigDoc(text string) (rows []docRow, errs []error) {
	for i, line := range strings.Split(text, "\n") {
		m := docRowStart.FindStringSubmatch(line)
		if m == nil {
			continue
		}
		cells := strings.Split(strings.Trim(strings.TrimSpace(line), "|"), "|")
		if len(cells) != 4 {
			errs = append(errs, fmt.Errorf("%s:%d: want 4 cells (variable, default, read by, meaning), got %d", configDocPath, i+1, len(cells)))
			continue
		}
		for j := range cells {
			cells[j] = strings.TrimSpace(cells[j])
		}
		def := cells[1]
		if def == emptyDefault {
			def = ""
		} else {
			def = strings.TrimSuffix(strings.TrimPrefix(def, "`"), "`")
		}
		rows = append(rows, docRow{line: i + 1, name: m[1], def: def, readBy: cells[2], meaning: cells[3]})
	}
	return rows, errs
}

// checkConfigDoc reports every way text disagrees with vars.
func checkConfigDoc(text string, vars []config.Var) []error {
	rows, errs := parseConfigDoc(text)
	declared := map[string]config.Var{}
	for _, v := range vars {
		declared[v.Name] = v
	}
	documented := map[string]int{}
	for _, r := range rows {
		v, ok := declared[r.name]
		if !ok {
			errs = append(errs, fmt.Errorf("%s:%d: %s is documented but not declared in config.Vars", configDocPath, r.line, r.name))
			continue
		}
		if prev, dup := documented[r.name]; dup {
			errs = append(errs, fmt.Errorf("%s:%d: %s is documented twice (also line %d)", configDocPath, r.line, r.name, prev))
		}
		documented[r.name] = r.line
		if r.def != v.Default {
			want := "`" + v.Default + "`"
			if v.Default == "" {
				want = emptyDefault
			}
			errs = append(errs, fmt.Errorf("%s:%d: %s default is %q in the doc, %q in config.Vars (write %s)", configDocPath, r.line, r.name, r.def, v.Default, want))
		}
		if r.readBy == "" || r.meaning == "" {
			errs = append(errs, fmt.Errorf("%s:%d: %s needs who reads it and what it means", configDocPath, r.line, r.name))
		}
	}
	for _, v := range vars {
		if _, ok := documented[v.Name]; !ok {
			errs = append(errs, fmt.Errorf("%s: %s is declared in config.Vars but has no row in the doc", configDocPath, v.Name))
		}
	}
	// Prose may not name variables that do not exist either.
	seen := map[string]bool{}
	for i, line := range strings.Split(text, "\n") {
		for _, name := range docVarName.FindAllString(line, -1) {
			if _, ok := declared[name]; !ok && !seen[name] {
				seen[name] = true
				errs = append(errs, fmt.Errorf("%s:%d: names %s, which is not declared in config.Vars", configDocPath, i+1, name))
			}
		}
	}
	sort.SliceStable(errs, func(i, j int) bool { return errs[i].Error() < errs[j].Error() })
	return errs
}

func readConfigDoc(t *testing.T) string {
	t.Helper()
	data, err := os.ReadFile(configDocPath)
	if err != nil {
		t.Fatal(err)
	}
	return string(data)
}

func TestConfigDocMatchesVars(t *testing.T) {
	report(t, checkConfigDoc(readConfigDoc(t), config.Vars))
}

// TestConfigDocCheckCatchesDrift proves the check fails on each kind of drift.
func TestConfigDocCheckCatchesDrift(t *testing.T) {
	doc := readConfigDoc(t)
	rows, _ := parseConfigDoc(doc)
	if len(rows) == 0 {
		t.Fatal("no variable rows found")
	}
	lines := strings.Split(doc, "\n")
	first := rows[0]

	t.Run("variable missing from the doc", func(t *testing.T) {
		mod := strings.Join(append(append([]string{}, lines[:first.line-1]...), lines[first.line:]...), "\n")
		wantErrorsNaming(t, checkConfigDoc(mod, config.Vars), first.name)
	})
	t.Run("doc names an undeclared variable", func(t *testing.T) {
		mod := doc + "\n| `FERRY_NOT_A_VAR` | `1` | api | Nothing. |\n\nSee also FERRY_ALSO_NOT_A_VAR.\n"
		wantErrorsNaming(t, checkConfigDoc(mod, config.Vars), "FERRY_NOT_A_VAR", "FERRY_ALSO_NOT_A_VAR")
	})
	t.Run("variable declared but not documented", func(t *testing.T) {
		vars := append(append([]config.Var{}, config.Vars...), config.Var{Name: "FERRY_NEW_SETTING", Default: "1", Doc: "New."})
		wantErrorsNaming(t, checkConfigDoc(doc, vars), "FERRY_NEW_SETTING")
	})
	t.Run("default out of date", func(t *testing.T) {
		vars := append([]config.Var{}, config.Vars...)
		for i := range vars {
			if vars[i].Name == first.name {
				vars[i].Default += "-changed"
			}
		}
		wantErrorsNaming(t, checkConfigDoc(doc, vars), first.name)
	})
}
