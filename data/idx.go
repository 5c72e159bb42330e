package data

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
)

// IDX is the format of the MNIST and Fashion-MNIST files: a magic number
// 0x0000TTNN (TT the element type, NN the number of dimensions), NN big-endian
// uint32 dimensions, then the elements. Only unsigned bytes (TT = 0x08) are
// read, which is what MNIST-style files hold. Files may be gzip-compressed;
// that is detected from their first two bytes, not their name.

const (
	idxUbyte = 0x08
	// maxIDXBytes bounds what a header may claim, so that a corrupt header
	// gives an error instead of an attempt to allocate terabytes.
	maxIDXBytes = 1 << 34
)

var idxTypeNames = map[byte]string{0x08: "unsigned byte", 0x09: "signed byte", 0x0b: "int16", 0x0c: "int32", 0x0d: "float32", 0x0e: "float64"}

// ReadIDX parses an unsigned-byte IDX stream, plain or gzip-compressed, and
// returns its dimensions and elements (len(data) is the product of dims).
// Trailing bytes after the elements are an error.
func ReadIDX(r io.Reader) (dims []int, data []byte, err error) {
	br := bufio.NewReaderSize(r, 64<<10)
	head, _ := br.Peek(2)
	var src io.Reader = br
	gz := len(head) == 2 && head[0] == 0x1f && head[1] == 0x8b
	if gz {
		zr, err := gzip.NewReader(br)
		if err != nil {
			return nil, nil, fmt.Errorf("gzip header: %w", err)
		}
		defer zr.Close()
		src = zr
	}
	var magic [4]byte
	if _, err := io.ReadFull(src, magic[:]); err != nil {
		return nil, nil, fmt.Errorf("reading the 4-byte IDX magic number: %w", eofIsTruncated(err))
	}
	if magic[0] != 0 || magic[1] != 0 {
		return nil, nil, fmt.Errorf("not an IDX file: magic number 0x%08x does not start with two zero bytes (want 0x00000801 for labels or 0x00000803 for images)", binary.BigEndian.Uint32(magic[:]))
	}
	if magic[2] != idxUbyte {
		name := idxTypeNames[magic[2]]
		if name == "" {
			name = "unknown"
		}
		return nil, nil, fmt.Errorf("IDX element type 0x%02x (%s) is not supported: only unsigned byte (0x08) files, as MNIST uses, are read", magic[2], name)
	}
	nd := int(magic[3])
	if nd == 0 {
		return nil, nil, errors.New("IDX header declares 0 dimensions: want 1 for labels or 3 for images")
	}
	hdr := make([]byte, 4*nd)
	if _, err := io.ReadFull(src, hdr); err != nil {
		return nil, nil, fmt.Errorf("reading %d IDX dimensions: %w", nd, eofIsTruncated(err))
	}
	dims = make([]int, nd)
	total := int64(1)
	for i := range dims {
		d := int64(binary.BigEndian.Uint32(hdr[4*i:]))
		dims[i] = int(d)
		if total > 0 && d > 0 && total > maxIDXBytes/d {
			return nil, nil, fmt.Errorf("IDX dimensions %v claim more than %d bytes: the header is corrupt", dimsOf(hdr), int64(maxIDXBytes))
		}
		total *= d
	}
	var buf bytes.Buffer
	buf.Grow(int(min(total, 1<<20)))
	got, err := io.CopyN(&buf, src, total)
	if err != nil && !errors.Is(err, io.EOF) {
		if gz && errors.Is(err, io.ErrUnexpectedEOF) {
			return nil, nil, fmt.Errorf("IDX data truncated: the gzip stream ends after %d of the %d bytes that dimensions %v need: the file is incomplete (an interrupted download?): fetch it again", got, total, dims)
		}
		if gz {
			return nil, nil, fmt.Errorf("IDX data: the gzip stream is corrupt after %d of %d bytes (%v): the file is damaged: fetch it again", got, total, err)
		}
		return nil, nil, fmt.Errorf("reading IDX data: %w", err)
	}
	if got < total {
		return nil, nil, fmt.Errorf("IDX data truncated: dimensions %v need %d bytes after the header, found %d", dims, total, got)
	}
	// Reading one byte more checks that nothing follows the data and, for
	// gzip, makes the reader verify the stream's checksum and length.
	var one [1]byte
	n, err := io.ReadFull(src, one[:])
	if n > 0 {
		return nil, nil, fmt.Errorf("IDX data has trailing bytes after the %d that dimensions %v describe: the file is corrupt or its header is wrong", total, dims)
	}
	if err != nil && !errors.Is(err, io.EOF) {
		if gz {
			// The data is whole, but what follows it is not a gzip end: the
			// checksum trailer is cut or damaged, or bytes follow the stream.
			return nil, nil, fmt.Errorf("after the %d bytes of IDX data: the gzip stream's end is missing or damaged (%v): the file is incomplete or has extra bytes: fetch it again", total, err)
		}
		return nil, nil, fmt.Errorf("after IDX data: %w", err)
	}
	return dims, buf.Bytes(), nil
}

func dimsOf(hdr []byte) []uint32 {
	d := make([]uint32, len(hdr)/4)
	for i := range d {
		d[i] = binary.BigEndian.Uint32(hdr[4*i:])
	}
	return d
}

func eofIsTruncated(err error) error {
	if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
		return errors.New("file truncated")
	}
	return err
}

// WriteIDX writes an unsigned-byte IDX stream (uncompressed; wrap w in a
// gzip.Writer for a .gz file). len(data) must be the product of dims.
func WriteIDX(w io.Writer, dims []int, data []byte) error {
	if len(dims) == 0 || len(dims) > 255 {
		return fmt.Errorf("data.WriteIDX: %d dimensions: use 1 to 255", len(dims))
	}
	total := 1
	for _, d := range dims {
		if d < 0 || uint64(d) > 0xffffffff {
			return fmt.Errorf("data.WriteIDX: dimension %d does not fit an IDX header (0 to 2^32-1)", d)
		}
		total *= d
	}
	if total != len(data) {
		return fmt.Errorf("data.WriteIDX: dimensions %v describe %d bytes but data holds %d", dims, total, len(data))
	}
	hdr := make([]byte, 4+4*len(dims))
	hdr[2], hdr[3] = idxUbyte, byte(len(dims))
	for i, d := range dims {
		binary.BigEndian.PutUint32(hdr[4+4*i:], uint32(d))
	}
	if _, err := w.Write(hdr); err != nil {
		return err
	}
	_, err := w.Write(data)
	return err
}

// readIDXFile opens and parses path; errors name the path.
func readIDXFile(path string, open func(string) (io.ReadCloser, error)) ([]int, []byte, error) {
	f, err := open(path)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return nil, nil, fmt.Errorf("%s: file not found: %w", path, err)
		}
		return nil, nil, err
	}
	defer f.Close()
	dims, data, err := ReadIDX(f)
	if err != nil {
		return nil, nil, fmt.Errorf("%s: %w", path, err)
	}
	return dims, data, nil
}

func osOpen(path string) (io.ReadCloser, error) { return os.Open(path) }

// ReadIDXImages reads an IDX image file (3 dimensions: count, rows, cols),
// plain or gzip-compressed. Errors name the path and what was expected.
func ReadIDXImages(path string) (n, rows, cols int, pixels []byte, err error) {
	return readImages(path, osOpen)
}

// ReadIDXLabels reads an IDX label file (1 dimension), plain or
// gzip-compressed. Errors name the path and what was expected.
func ReadIDXLabels(path string) (labels []byte, err error) {
	return readLabels(path, osOpen)
}

func readImages(path string, open func(string) (io.ReadCloser, error)) (n, rows, cols int, pixels []byte, err error) {
	dims, data, err := readIDXFile(path, open)
	if err != nil {
		return 0, 0, 0, nil, fmt.Errorf("data: read IDX images: %w", err)
	}
	if len(dims) != 3 {
		return 0, 0, 0, nil, fmt.Errorf("data: read IDX images: %s: has %d dimensions %v, want 3 (count, rows, cols): is it a label file?", path, len(dims), dims)
	}
	return dims[0], dims[1], dims[2], data, nil
}

func readLabels(path string, open func(string) (io.ReadCloser, error)) ([]byte, error) {
	dims, data, err := readIDXFile(path, open)
	if err != nil {
		return nil, fmt.Errorf("data: read IDX labels: %w", err)
	}
	if len(dims) != 1 {
		return nil, fmt.Errorf("data: read IDX labels: %s: has %d dimensions %v, want 1 (count): is it an image file?", path, len(dims), dims)
	}
	return data, nil
}
