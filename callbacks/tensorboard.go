package callbacks

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"math"
	"os"
	"path/filepath"
	"sort"
	"sync/atomic"
	"time"

	"google.golang.org/protobuf/encoding/protowire"

	"github.com/fulgur-ml/fulgur/trainer"
)

// TensorBoardLogger writes a TensorBoard event file into its run directory:
// scalars for every logged metric, and the hyperparameters for
// TensorBoard's HParams tab. The file is a TFRecord stream (each record: a
// little-endian uint64 length, its masked CRC-32C, the bytes, their masked
// CRC-32C) of protobuf tensorflow.Event messages, encoded with protowire
// from the message definitions (field numbers noted below).
type TensorBoardLogger struct {
	hp      map[string]any // hyperparameters logged so far (merged)
	dir     string
	now     func() time.Time
	f       *os.File
	w       *bufio.Writer
	hparams bool // a session start was written: Finalize writes its end
	// hpPending: LogHyperparams was called since the session start was
	// last written; it is written before the next scalars (see
	// LogHyperparams).
	hpPending bool
	path      string
}

var (
	_ trainer.Logger       = (*TensorBoardLogger)(nil)
	_ trainer.Resumer      = (*TensorBoardLogger)(nil)
	_ trainer.ReadyChecker = (*TensorBoardLogger)(nil)
)

var tbSeq atomic.Int64

// NewTensorBoardLogger logs into dir, usually from VersionDir. now is the
// clock of the events' wall times (nil: time.Now).
func NewTensorBoardLogger(dir string, now func() time.Time) (*TensorBoardLogger, error) {
	if dir == "" {
		return nil, errors.New("TensorBoardLogger: the directory is empty: pass a run directory, such as the one VersionDir returns")
	}
	if now == nil {
		now = time.Now
	}
	return &TensorBoardLogger{dir: dir, now: now}, nil
}

func (l *TensorBoardLogger) Name() string { return "TensorBoardLogger" }

// CheckReady refuses a TensorBoardLogger not made by NewTensorBoardLogger
// (trainer.ReadyChecker).
func (l *TensorBoardLogger) CheckReady() error {
	if l.dir == "" { // NewTensorBoardLogger refuses it
		return literal("NewTensorBoardLogger", "has no directory to write into")
	}
	return nil
}

// Path is the event file ("" before the first write).
func (l *TensorBoardLogger) Path() string { return l.path }

func (l *TensorBoardLogger) open() error {
	if l.f != nil {
		return nil
	}
	if l.path != "" {
		// Logging again after Finalize (the CLI's test results after Fit):
		// the same run goes on in the same file.
		if f, err := os.OpenFile(l.path, os.O_WRONLY|os.O_APPEND, 0); err == nil {
			l.f, l.w = f, bufio.NewWriter(f)
			return nil
		}
	}
	if err := os.MkdirAll(l.dir, 0o755); err != nil {
		return err
	}
	host, _ := os.Hostname()
	if host == "" {
		host = "localhost"
	}
	t := l.now()
	l.path = filepath.Join(l.dir, fmt.Sprintf("events.out.tfevents.%d.%s.%d.%d", t.Unix(), host, os.Getpid(), tbSeq.Add(1)-1))
	f, err := os.OpenFile(l.path, os.O_CREATE|os.O_WRONLY|os.O_EXCL, 0o644)
	if err != nil {
		return err
	}
	l.f, l.w = f, bufio.NewWriter(f)
	// The first event names the file format version.
	ev := eventHeader(nil, wallTime(t), 0)
	ev = protowire.AppendTag(ev, 3, protowire.BytesType) // Event.file_version
	ev = protowire.AppendString(ev, "brain.Event:2")
	return l.record(ev)
}

func wallTime(t time.Time) float64 { return float64(t.UnixNano()) / 1e9 }

// eventHeader appends Event.wall_time (1, double) and Event.step (2, int64).
func eventHeader(b []byte, wall float64, step int64) []byte {
	b = protowire.AppendTag(b, 1, protowire.Fixed64Type)
	b = protowire.AppendFixed64(b, math.Float64bits(wall))
	if step != 0 {
		b = protowire.AppendTag(b, 2, protowire.VarintType)
		b = protowire.AppendVarint(b, uint64(step))
	}
	return b
}

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// MaskedCRC32C is TFRecord's checksum: CRC-32C rotated and offset so that
// CRCs of data containing CRCs stay well distributed.
func MaskedCRC32C(b []byte) uint32 {
	c := crc32.Checksum(b, castagnoli)
	return ((c >> 15) | (c << 17)) + 0xa282ead8
}

// record writes one TFRecord and flushes it, so TensorBoard sees it live.
func (l *TensorBoardLogger) record(data []byte) error {
	var hdr [12]byte
	binary.LittleEndian.PutUint64(hdr[:8], uint64(len(data)))
	binary.LittleEndian.PutUint32(hdr[8:], MaskedCRC32C(hdr[:8]))
	var foot [4]byte
	binary.LittleEndian.PutUint32(foot[:], MaskedCRC32C(data))
	l.w.Write(hdr[:])
	l.w.Write(data)
	l.w.Write(foot[:])
	return l.w.Flush()
}

// LogMetrics writes one Event holding a Summary with one simple_value per
// metric, tags sorted.
func (l *TensorBoardLogger) LogMetrics(step int, m map[string]float64) error {
	if err := l.open(); err != nil {
		return err
	}
	if err := l.writeHParams(); err != nil {
		return err
	}
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var sum []byte
	for _, k := range keys {
		var v []byte
		v = protowire.AppendTag(v, 1, protowire.BytesType) // Summary.Value.tag
		v = protowire.AppendString(v, k)
		v = protowire.AppendTag(v, 2, protowire.Fixed32Type) // Summary.Value.simple_value
		v = protowire.AppendFixed32(v, math.Float32bits(float32(m[k])))
		sum = protowire.AppendTag(sum, 1, protowire.BytesType) // Summary.value
		sum = protowire.AppendBytes(sum, v)
	}
	ev := eventHeader(nil, wallTime(l.now()), int64(step))
	ev = protowire.AppendTag(ev, 5, protowire.BytesType) // Event.summary
	ev = protowire.AppendBytes(ev, sum)
	return l.record(ev)
}

// ResumeAt writes SessionLog START events at step+1: TensorBoard then
// drops the events of earlier files in the directory whose step is step+1
// or later, the steps an interrupted run trained past its checkpoint.
// PyTorch's SummaryWriter(purge_step=step+1) writes one such event, but
// since TensorBoard 2.5 (tensorboard#4763) the first START of a run is
// taken for the run's start and purges nothing, so a single one, in a
// directory whose earlier file has none, left the abandoned steps beside
// the resumed ones. Two are written: the second purges whether or not the
// first is taken for the start, and a purge at the same step twice drops
// nothing more.
func (l *TensorBoardLogger) ResumeAt(step int) error {
	if err := l.open(); err != nil {
		return err
	}
	var sl []byte
	sl = protowire.AppendTag(sl, 1, protowire.VarintType) // SessionLog.status
	sl = protowire.AppendVarint(sl, 1)                    // START
	ev := eventHeader(nil, wallTime(l.now()), int64(step)+1)
	ev = protowire.AppendTag(ev, 7, protowire.BytesType) // Event.session_log
	ev = protowire.AppendBytes(ev, sl)
	if err := l.record(ev); err != nil {
		return err
	}
	return l.record(ev)
}

// hparamsEvent wraps HParamsPluginData content in an Event whose Summary
// has one value tagged tag, with SummaryMetadata naming the "hparams"
// plugin and a scalar float tensor 0, as TensorBoard's own writer does.
func hparamsEvent(wall float64, tag string, content []byte) []byte {
	var pd []byte
	pd = protowire.AppendTag(pd, 1, protowire.BytesType) // PluginData.plugin_name
	pd = protowire.AppendString(pd, "hparams")
	pd = protowire.AppendTag(pd, 2, protowire.BytesType) // PluginData.content
	pd = protowire.AppendBytes(pd, content)
	var md []byte
	md = protowire.AppendTag(md, 1, protowire.BytesType) // SummaryMetadata.plugin_data
	md = protowire.AppendBytes(md, pd)
	var tp []byte
	tp = protowire.AppendTag(tp, 1, protowire.VarintType) // TensorProto.dtype = DT_FLOAT
	tp = protowire.AppendVarint(tp, 1)
	tp = protowire.AppendTag(tp, 2, protowire.BytesType) // TensorProto.tensor_shape: scalar
	tp = protowire.AppendBytes(tp, nil)
	tp = protowire.AppendTag(tp, 5, protowire.BytesType) // TensorProto.float_val, packed
	tp = protowire.AppendBytes(tp, protowire.AppendFixed32(nil, 0))
	var v []byte
	v = protowire.AppendTag(v, 1, protowire.BytesType) // Value.tag
	v = protowire.AppendString(v, tag)
	v = protowire.AppendTag(v, 9, protowire.BytesType) // Value.metadata
	v = protowire.AppendBytes(v, md)
	v = protowire.AppendTag(v, 8, protowire.BytesType) // Value.tensor
	v = protowire.AppendBytes(v, tp)
	var sum []byte
	sum = protowire.AppendTag(sum, 1, protowire.BytesType)
	sum = protowire.AppendBytes(sum, v)
	ev := eventHeader(nil, wall, 0)
	ev = protowire.AppendTag(ev, 5, protowire.BytesType)
	return protowire.AppendBytes(ev, sum)
}

// protoValue encodes a google.protobuf.Value: number_value (2), string_value
// (3) or bool_value (4); other types as their fmt string.
func protoValue(x any) []byte {
	var b []byte
	num := func(f float64) []byte {
		b = protowire.AppendTag(b, 2, protowire.Fixed64Type)
		return protowire.AppendFixed64(b, math.Float64bits(f))
	}
	switch v := x.(type) {
	case bool:
		b = protowire.AppendTag(b, 4, protowire.VarintType)
		return protowire.AppendVarint(b, protowire.EncodeBool(v))
	case float64:
		return num(v)
	case float32:
		return num(float64(v))
	case int:
		return num(float64(v))
	case int64:
		return num(float64(v))
	case int32:
		return num(float64(v))
	case uint64:
		return num(float64(v))
	case uint32:
		return num(float64(v))
	case uint:
		return num(float64(v))
	case string:
		b = protowire.AppendTag(b, 3, protowire.BytesType)
		return protowire.AppendString(b, v)
	}
	b = protowire.AppendTag(b, 3, protowire.BytesType)
	return protowire.AppendString(b, fmt.Sprint(x))
}

// LogHyperparams records hyperparameters, merged with earlier calls, for a
// session_start_info summary: HParamsPluginData {version 0,
// session_start_info (3): SessionStartInfo{hparams (1): map entries {key 1,
// value 2}, start_time_secs (5)}}. TensorBoard builds the experiment from
// it and the run's scalars. TensorBoard keeps only the first summary of a
// tag's metadata in a run, so the summary is written once the calls that
// precede the first scalars are all in (at the next LogMetrics, or at
// Finalize): a program that logs its flags, then the module its own
// hyperparameters, shows both. Hyperparameters logged after the first
// scalars are written too, but TensorBoard does not show them.
func (l *TensorBoardLogger) LogHyperparams(h map[string]any) error {
	if err := l.open(); err != nil {
		return err
	}
	l.hp = mergeHParams(l.hp, h)
	l.hpPending = true
	return nil
}

// writeHParams writes the session_start_info summary of the
// hyperparameters logged so far, if LogHyperparams was called since it
// was last written.
func (l *TensorBoardLogger) writeHParams() error {
	if !l.hpPending {
		return nil
	}
	l.hpPending = false
	h := l.hp
	keys := make([]string, 0, len(h))
	for k := range h {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var ssi []byte
	for _, k := range keys {
		var e []byte
		e = protowire.AppendTag(e, 1, protowire.BytesType)
		e = protowire.AppendString(e, k)
		e = protowire.AppendTag(e, 2, protowire.BytesType)
		e = protowire.AppendBytes(e, protoValue(h[k]))
		ssi = protowire.AppendTag(ssi, 1, protowire.BytesType)
		ssi = protowire.AppendBytes(ssi, e)
	}
	now := wallTime(l.now())
	ssi = protowire.AppendTag(ssi, 5, protowire.Fixed64Type)
	ssi = protowire.AppendFixed64(ssi, math.Float64bits(now))
	var pd []byte
	pd = protowire.AppendTag(pd, 3, protowire.BytesType) // HParamsPluginData.session_start_info
	pd = protowire.AppendBytes(pd, ssi)
	l.hparams = true
	return l.record(hparamsEvent(now, "_hparams_/session_start_info", pd))
}

// Finalize writes the session's end (status 1 success, 2 failure, 0
// unknown for an interrupted run) when hyperparameters were logged, and
// closes the file.
func (l *TensorBoardLogger) Finalize(status string) error {
	if l.f == nil {
		return nil
	}
	err := l.writeHParams()
	if l.hparams {
		code := map[string]uint64{"success": 1, "failed": 2}[status]
		now := wallTime(l.now())
		var sei []byte
		sei = protowire.AppendTag(sei, 1, protowire.VarintType) // SessionEndInfo.status
		sei = protowire.AppendVarint(sei, code)
		sei = protowire.AppendTag(sei, 2, protowire.Fixed64Type) // SessionEndInfo.end_time_secs
		sei = protowire.AppendFixed64(sei, math.Float64bits(now))
		var pd []byte
		pd = protowire.AppendTag(pd, 4, protowire.BytesType) // HParamsPluginData.session_end_info
		pd = protowire.AppendBytes(pd, sei)
		err = errors.Join(err, l.record(hparamsEvent(now, "_hparams_/session_end_info", pd)))
		l.hparams = false
	}
	err = errors.Join(err, l.w.Flush(), l.f.Sync(), l.f.Close())
	l.f = nil
	return err
}
