package launch

import (
	"bytes"
	"io"
	"strconv"
	"sync"
)

// sharedOut is one destination that the ranks of a job write to, one whole
// line at a time, so that the lines of two ranks never cut into each other.
type sharedOut struct {
	mu sync.Mutex
	w  io.Writer
}

// maxHeld is the most of one line a labelled stream holds waiting for its
// newline: a longer line (a rank writing a progress bar with carriage
// returns only, or binary data) is written in pieces of this size as it
// comes, so the launcher's memory stays bounded and the output is not
// held back until the rank exits. Only such a line can have another
// rank's line cut into it.
const maxHeld = 64 << 10

// labelled is one rank's stream into a sharedOut: it holds a partial line
// until its newline arrives (or maxHeld of it) and writes each line whole,
// after prefix ("[rank1] "; "" for none).
type labelled struct {
	out    *sharedOut
	prefix []byte
	mu     sync.Mutex
	line   []byte
	// cont: the line being held continues one already partly written,
	// after its prefix.
	cont bool
}

// RankPrefix is what RunElastic puts before each line a rank writes to the
// launcher's stderr (and, for ranks other than 0, its stdout): "[rank1] ",
// as mpirun --tag-output and torchrun's log prefix name the rank.
func RankPrefix(rank int) string { return "[rank" + strconv.Itoa(rank) + "] " }

func (l *labelled) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := len(p)
	for len(p) > 0 {
		i := bytes.IndexByte(p, '\n')
		if i < 0 {
			l.line = append(l.line, p...)
			if len(l.line) < maxHeld {
				break
			}
			p = nil
		} else {
			l.line = append(l.line, p[:i+1]...)
			p = p[i+1:]
		}
		if err := l.flushLocked(); err != nil {
			return n - len(p), err
		}
	}
	return n, nil
}

// Flush writes a last line that had no newline (a rank that ended
// mid-line), with one added.
func (l *labelled) Flush() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.line) == 0 && !l.cont {
		return nil
	}
	l.line = append(l.line, '\n')
	return l.flushLocked()
}

func (l *labelled) flushLocked() error {
	l.out.mu.Lock()
	defer l.out.mu.Unlock()
	prefix := l.prefix
	if l.cont {
		prefix = nil
	}
	buf := append(append(make([]byte, 0, len(prefix)+len(l.line)), prefix...), l.line...)
	l.cont = buf[len(buf)-1] != '\n'
	l.line = l.line[:0]
	_, err := l.out.w.Write(buf)
	return err
}
