package config

import (
	"errors"
	"strings"
	"testing"
)

func TestExpand(t *testing.T) {
	env := map[string]string{"TOKEN": "s3cret", "EMPTY": "", "HOST": "h.example"}
	lookup := func(name string) (string, bool) { v, ok := env[name]; return v, ok }
	cases := map[string]struct {
		in, want, err string
	}{
		"no reference":            {in: "plain $HOME text", want: "plain $HOME text"},
		"simple":                  {in: "Bearer ${TOKEN}", want: "Bearer s3cret"},
		"several":                 {in: "${HOST}/${TOKEN}/${HOST}", want: "h.example/s3cret/h.example"},
		"default used when unset": {in: "${MISSING:-fallback}", want: "fallback"},
		"default used when empty": {in: "${EMPTY:-fallback}", want: "fallback"},
		"default not used":        {in: "${TOKEN:-fallback}", want: "s3cret"},
		"empty default":           {in: "a${MISSING:-}b", want: "ab"},
		"set but empty":           {in: "a${EMPTY}b", want: "ab"},
		"default with colon":      {in: "${MISSING:-http://x:1}", want: "http://x:1"},
		"missing":                 {in: "x ${NOPE} y", err: `variable "NOPE" is not set and has no default`},
		"unterminated":            {in: "${TOKEN", err: "unterminated variable reference"},
		"bad name":                {in: "x ${A-B}", err: `invalid variable reference at byte 2: a name is a letter`},
		"empty name":              {in: "${}", err: "invalid variable reference"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			got, err := Expand(tc.in, lookup)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("want error %q, got %q, %v", tc.err, got, err)
				}
				if strings.Contains(err.Error(), "s3cret") {
					t.Fatal("an error message must never carry a resolved value")
				}
				return
			}
			if err != nil || got != tc.want {
				t.Fatalf("Expand(%q) = %q, %v; want %q", tc.in, got, err, tc.want)
			}
		})
	}
}

func TestExpandMissingIsTyped(t *testing.T) {
	_, err := Expand("${GITHUB_TOKEN}", func(string) (string, bool) { return "", false })
	var missing *MissingVariableError
	if !errors.As(err, &missing) || missing.Name != "GITHUB_TOKEN" {
		t.Fatalf("want a MissingVariableError naming GITHUB_TOKEN, got %v", err)
	}
}

func TestReferences(t *testing.T) {
	got, err := References("${A} ${B:-x} ${A}")
	if err != nil || strings.Join(got, ",") != "A,B" {
		t.Fatalf("References = %v, %v", got, err)
	}
}
