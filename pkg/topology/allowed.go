package topology

import (
	"fmt"
	"slices"
	"strings"

	v1 "k8s.io/api/core/v1"
)

// Flatten expands allowedTopologies into the segments it allows. Terms are
// ORed; the expressions of a term are ANDed, so a term expands to the
// cartesian product of its expressions' values (see the package example).
// The result is sorted by Segment.String, without duplicates. nil or empty
// terms give nil. An expression without values, an empty key, or a key used
// twice in one term is an error wrapping ErrInvalidTopology.
func Flatten(terms []v1.TopologySelectorTerm) ([]Segment, error) {
	if err := validateTerms(terms); err != nil {
		return nil, err
	}
	var out []Segment
	for _, term := range terms {
		product := []Segment{{}}
		for _, expr := range term.MatchLabelExpressions {
			next := make([]Segment, 0, len(product)*len(expr.Values))
			for _, partial := range product {
				for _, val := range expr.Values {
					seg := make(Segment, len(partial)+1)
					for k, v := range partial {
						seg[k] = v
					}
					seg[expr.Key] = val
					next = append(next, seg)
				}
			}
			product = next
		}
		for _, seg := range product {
			if len(seg) > 0 {
				out = append(out, seg)
			}
		}
	}
	if len(out) == 0 {
		return nil, nil
	}
	return sortSegments(out), nil
}

func validateTerms(terms []v1.TopologySelectorTerm) error {
	for i, term := range terms {
		seen := make(map[string]bool, len(term.MatchLabelExpressions))
		for _, expr := range term.MatchLabelExpressions {
			switch {
			case expr.Key == "":
				return fmt.Errorf("%w: term %d has an expression with an empty key", ErrInvalidTopology, i)
			case len(expr.Values) == 0:
				return fmt.Errorf("%w: term %d: key %q has no values", ErrInvalidTopology, i, expr.Key)
			case seen[expr.Key]:
				return fmt.Errorf("%w: term %d names key %q twice", ErrInvalidTopology, i, expr.Key)
			}
			seen[expr.Key] = true
		}
	}
	return nil
}

// MatchLabels reports whether labels satisfy allowedTopologies, as the
// scheduler does: nil or empty terms match everything; otherwise some term
// must have every expression's key among labels with one of its values. A
// term without expressions matches nothing (kube-scheduler's volume binding
// and Flatten agree). Keys that are not driver topology keys are matched
// like any other.
func MatchLabels(terms []v1.TopologySelectorTerm, labels map[string]string) bool {
	if len(terms) == 0 {
		return true
	}
	for _, term := range terms {
		if len(term.MatchLabelExpressions) > 0 && termMatches(term, func(key string, values []string) bool {
			v, ok := labels[key]
			return ok && contains(values, v)
		}) {
			return true
		}
	}
	return false
}

// termMatches reports whether accept holds for every expression of term.
func termMatches(term v1.TopologySelectorTerm, accept func(key string, values []string) bool) bool {
	for _, expr := range term.MatchLabelExpressions {
		if !accept(expr.Key, expr.Values) {
			return false
		}
	}
	return true
}

// termsID is a canonical string of valid terms: equal for allowedTopologies
// that differ only in the order of terms, of expressions or of values, or in
// duplicates. It keys the Index's term sets.
func termsID(terms []v1.TopologySelectorTerm) string {
	ids := make([]string, 0, len(terms))
	for _, term := range terms {
		exprs := make([]string, 0, len(term.MatchLabelExpressions))
		for _, e := range term.MatchLabelExpressions {
			values := slices.Compact(slices.Sorted(slices.Values(e.Values)))
			exprs = append(exprs, e.Key+"\x01"+strings.Join(values, "\x02"))
		}
		slices.Sort(exprs)
		ids = append(ids, strings.Join(exprs, "\x03"))
	}
	slices.Sort(ids)
	return strings.Join(slices.Compact(ids), "\x04")
}

// formatTerms renders allowedTopologies for messages, terms as written:
// [{zone in (z1,z2), example.com/pool in (gold)}, {zone in (z3)}].
func formatTerms(terms []v1.TopologySelectorTerm) string {
	var b strings.Builder
	b.WriteByte('[')
	for i, term := range terms {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteByte('{')
		for j, e := range term.MatchLabelExpressions {
			if j > 0 {
				b.WriteString(", ")
			}
			fmt.Fprintf(&b, "%s in (%s)", e.Key, strings.Join(e.Values, ","))
		}
		b.WriteByte('}')
	}
	b.WriteByte(']')
	return b.String()
}

func contains(values []string, v string) bool {
	for _, x := range values {
		if x == v {
			return true
		}
	}
	return false
}
