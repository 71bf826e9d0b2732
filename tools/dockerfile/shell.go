package main

import (
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"

	"github.com/moby/buildkit/solver/pb"
	"mvdan.cc/sh/v3/expand"
	"mvdan.cc/sh/v3/syntax"
)

// Run is one process of the build: a RUN instruction.
type Run struct {
	// Args, Env and Cwd are the process's, as BuildKit starts it (a shell
	// form RUN is /bin/sh -c <script>; Env holds the ARGs in scope too).
	Args []string `json:"args"`
	Env  []string `json:"env"`
	Cwd  string   `json:"cwd"`
	// Calls are the simple commands of the script in the order they run,
	// each with its words expanded as the shell would; an exec form RUN is
	// one call.
	Calls []Call `json:"calls"`
	// Substitutions are the command substitutions in the words of Calls:
	// each stands in a word as its Text, $(<args joined by spaces>), since
	// the output is known only when the command runs.
	Substitutions []Substitution `json:"substitutions,omitempty"`
}

// Call is a simple command of a script.
type Call struct {
	// Env is the command's environment, sorted: the process's, as the
	// script changed it, and the command's own assignments.
	Env  []string `json:"env"`
	Args []string `json:"args"`
}

// Substitution is a command substitution, $(...).
type Substitution struct {
	Text string   `json:"text"`
	Args []string `json:"args"`
}

// newRun reads the process of an exec op and, for /bin/sh -c, its script.
func newRun(meta *pb.Meta) (Run, error) {
	r := Run{Args: meta.GetArgs(), Env: meta.GetEnv(), Cwd: meta.GetCwd()}
	if len(r.Args) != 3 || r.Args[0] != "/bin/sh" || r.Args[1] != "-c" {
		r.Calls = []Call{{Env: slices.Sorted(slices.Values(r.Env)), Args: r.Args}}
		return r, nil
	}
	f, err := syntax.NewParser(syntax.Variant(syntax.LangPOSIX)).Parse(strings.NewReader(r.Args[2]), "RUN")
	if err != nil {
		return r, fmt.Errorf("RUN %q: %w", r.Args[2], err)
	}
	s := &script{env: map[string]string{}, vars: map[string]string{}, run: &r}
	for _, kv := range r.Env {
		k, v, _ := strings.Cut(kv, "=")
		s.env[k] = v
	}
	for _, st := range f.Stmts {
		if err := s.stmt(st); err != nil {
			return r, fmt.Errorf("RUN %q: %w", r.Args[2], err)
		}
	}
	return r, nil
}

// script follows the variables of a script through its statements.
type script struct {
	// env holds the exported variables, vars the shell's own.
	env, vars map[string]string
	run       *Run
}

func (s *script) stmt(st *syntax.Stmt) error {
	switch c := st.Cmd.(type) {
	case *syntax.CallExpr:
		return s.call(c)
	case *syntax.BinaryCmd:
		if err := s.stmt(c.X); err != nil {
			return err
		}
		return s.stmt(c.Y)
	case *syntax.Block:
		for _, st := range c.Stmts {
			if err := s.stmt(st); err != nil {
				return err
			}
		}
		return nil
	default:
		return fmt.Errorf("%T: only simple commands, lists, pipelines and { } are read", c)
	}
}

func (s *script) config() *expand.Config {
	var pairs []string
	for k, v := range s.env {
		pairs = append(pairs, k+"="+v)
	}
	for k, v := range s.vars {
		pairs = append(pairs, k+"="+v)
	}
	return &expand.Config{Env: expand.ListEnviron(pairs...), CmdSubst: s.substitute}
}

// call records a simple command, or sets the variables of a bare
// assignment.
func (s *script) call(c *syntax.CallExpr) error {
	cfg := s.config()
	own := map[string]string{}
	for _, a := range c.Assigns {
		v := ""
		if a.Value != nil {
			var err error
			if v, err = expand.Literal(cfg, a.Value); err != nil {
				return err
			}
		}
		own[a.Name.Value] = v
	}
	if len(c.Args) == 0 {
		for k, v := range own {
			if _, exported := s.env[k]; exported {
				s.env[k] = v
			} else {
				s.vars[k] = v
			}
		}
		return nil
	}
	args, err := expand.Fields(cfg, c.Args...)
	if err != nil {
		return err
	}
	env := maps.Clone(s.env)
	maps.Copy(env, own)
	var pairs []string
	for k, v := range env {
		pairs = append(pairs, k+"="+v)
	}
	slices.Sort(pairs)
	s.run.Calls = append(s.run.Calls, Call{Env: pairs, Args: args})
	return nil
}

// substitute stands for $(cmd): it writes $(<cmd's words>) and records them.
func (s *script) substitute(w io.Writer, cs *syntax.CmdSubst) error {
	if len(cs.Stmts) != 1 {
		return fmt.Errorf("$(...) with %d commands: only one simple command is read", len(cs.Stmts))
	}
	c, ok := cs.Stmts[0].Cmd.(*syntax.CallExpr)
	if !ok || len(c.Assigns) != 0 {
		return fmt.Errorf("$(...) of a %T: only a simple command is read", cs.Stmts[0].Cmd)
	}
	args, err := expand.Fields(s.config(), c.Args...)
	if err != nil {
		return err
	}
	sub := Substitution{Text: "$(" + strings.Join(args, " ") + ")", Args: args}
	s.run.Substitutions = append(s.run.Substitutions, sub)
	_, err = io.WriteString(w, sub.Text)
	return err
}
