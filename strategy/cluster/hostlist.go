package cluster

import (
	"fmt"
	"strconv"
	"strings"
)

// maxHosts bounds an expansion so a typo like node[1-999999999] is an error,
// not an out-of-memory.
const maxHosts = 1 << 20

// ExpandHostList expands a SLURM host list such as "node[01-04,07],gpu1" or
// "rack[1-2]-n[1-2]" into host names, keeping zero padding, in order.
func ExpandHostList(s string) ([]string, error) {
	var out []string
	depth, start := 0, 0
	for i := 0; i <= len(s); i++ {
		if i < len(s) {
			switch s[i] {
			case '[':
				depth++
				if depth > 1 {
					return nil, fmt.Errorf("host list %q: nested '[' at byte %d", s, i)
				}
				continue
			case ']':
				depth--
				if depth < 0 {
					return nil, fmt.Errorf("host list %q: ']' without '[' at byte %d", s, i)
				}
				continue
			case ',':
				if depth > 0 {
					continue
				}
			default:
				continue
			}
		}
		if depth != 0 {
			return nil, fmt.Errorf("host list %q: '[' is never closed", s)
		}
		item := strings.TrimSpace(s[start:i])
		start = i + 1
		if item == "" {
			return nil, fmt.Errorf("host list %q: empty host name", s)
		}
		hosts, err := expandOne(item)
		if err != nil {
			return nil, fmt.Errorf("host list %q: %w", s, err)
		}
		out = append(out, hosts...)
		if len(out) > maxHosts {
			return nil, fmt.Errorf("host list %q: more than %d hosts", s, maxHosts)
		}
	}
	return out, nil
}

// expandOne expands one host pattern with any number of [...] groups.
func expandOne(p string) ([]string, error) {
	open := strings.IndexByte(p, '[')
	if open < 0 {
		return []string{p}, nil
	}
	closeAt := strings.IndexByte(p[open:], ']') + open
	prefix, body, rest := p[:open], p[open+1:closeAt], p[closeAt+1:]
	tails, err := expandOne(rest)
	if err != nil {
		return nil, err
	}
	var out []string
	for _, r := range strings.Split(body, ",") {
		lo, hi, found := strings.Cut(r, "-")
		if !found {
			hi = lo
		}
		a, err1 := strconv.Atoi(lo)
		b, err2 := strconv.Atoi(hi)
		if err1 != nil || err2 != nil || lo == "" || hi == "" || a < 0 {
			return nil, fmt.Errorf("range %q in %q is not N or N-M", r, p)
		}
		if b < a {
			return nil, fmt.Errorf("range %q in %q runs backwards", r, p)
		}
		// Bound the whole expansion, not each range alone (many large ranges
		// in one bracket), and without overflowing on huge numbers.
		if b-a >= maxHosts || (b-a+1)*max(len(tails), 1) > maxHosts-len(out) {
			return nil, fmt.Errorf("range %q in %q expands to more than %d hosts", r, p, maxHosts)
		}
		width := len(lo)
		for v := a; v <= b; v++ {
			num := strconv.Itoa(v)
			if len(num) < width {
				num = strings.Repeat("0", width-len(num)) + num
			}
			for _, t := range tails {
				out = append(out, prefix+num+t)
			}
		}
	}
	return out, nil
}
