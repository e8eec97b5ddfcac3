package config

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"time"

	configv1 "github.com/ratekit/ratekit/proto/ratelimit/config/v1"
)

// DefaultSettle is the pause between the two reads of ReadStable.
const DefaultSettle = 500 * time.Millisecond

// ErrFileChanging is returned (wrapped) by ReadStable and LoadRateLimitsStable
// when the file changed between two reads: it is still being written, and
// will be read again at the next reload.
var ErrFileChanging = errors.New("the file is still being written")

// ReadStable returns the content of the file at path only when two reads,
// settle apart, agree on it (content, size and modification time).
//
// A reload that races a deploy writing the file in place can otherwise read
// a truncated file, and a truncated YAML file is often still valid, with
// fewer rules: many of a file's prefixes parse. Deploys that replace the file
// atomically (write a temporary file and rename it, or the symlink swap of a
// Kubernetes ConfigMap volume) never show a partial file; the double read
// covers the others. A missing file reads as fs.ErrNotExist, and a file that
// appears or disappears between the reads is changing.
func ReadStable(ctx context.Context, path string, settle time.Duration) ([]byte, error) {
	first, fi1, err := readStat(path)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return nil, err
	}
	t := time.NewTimer(settle)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return nil, ctx.Err()
	case <-t.C:
	}
	second, fi2, err2 := readStat(path)
	if errors.Is(err, fs.ErrNotExist) && errors.Is(err2, fs.ErrNotExist) {
		return nil, err
	}
	if err2 != nil && !errors.Is(err2, fs.ErrNotExist) {
		return nil, err2
	}
	if (err == nil) != (err2 == nil) || !bytes.Equal(first, second) ||
		fi1.Size() != fi2.Size() || !fi1.ModTime().Equal(fi2.ModTime()) {
		return nil, fmt.Errorf("%s: %w (it changed within %v); it is read again at the next reload", path, ErrFileChanging, settle)
	}
	return second, nil
}

func readStat(path string) ([]byte, fs.FileInfo, error) {
	data, err := readFile(path)
	if err != nil {
		return nil, nil, err
	}
	fi, err := os.Stat(path)
	if err != nil {
		return nil, nil, err
	}
	return data, fi, nil
}

// LoadRateLimitsStable is LoadRateLimits for reloads: it reads the file with
// ReadStable, so that a file caught while being written is never applied
// (the error wraps ErrFileChanging and the caller keeps its rules).
func LoadRateLimitsStable(ctx context.Context, path string, available *AvailableLimiters, settle time.Duration) (*RateLimits, error) {
	data, err := ReadStable(ctx, path, settle)
	if errors.Is(err, fs.ErrNotExist) {
		return &RateLimits{File: path, Proto: &configv1.RateLimits{}, doc: newDoc(path)}, nil
	}
	if err != nil {
		return nil, fmt.Errorf("load rate limits: %w", err)
	}
	return ParseRateLimits(path, data, available)
}
