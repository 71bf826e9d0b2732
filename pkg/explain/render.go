package explain

import (
	"fmt"
	"io"
)

// Mark is the sign a State is printed with.
func (s State) Mark() string {
	switch s {
	case Pass:
		return "✓"
	case Fail:
		return "✗"
	case Unknown:
		return "?"
	}
	return "·"
}

// WriteText prints a report for people: a header, the chain one line per
// step, and the conclusion on one line.
func WriteText(w io.Writer, r *Report) error {
	header := fmt.Sprintf("claim %s (%s)", r.Claim, r.Phase)
	if r.Pod != "" {
		header += ", used by pod " + r.Pod
	}
	if r.Driver != "" {
		header += ", driver " + r.Driver
	}
	if _, err := fmt.Fprintln(w, header); err != nil {
		return err
	}
	for _, l := range r.Chain {
		if _, err := fmt.Fprintf(w, "  %s %-11s %s\n", l.State.Mark(), l.Step, l.Text); err != nil {
			return err
		}
	}
	_, err := fmt.Fprintf(w, "conclusion (%s): %s\n", r.Cause, r.Conclusion)
	return err
}
