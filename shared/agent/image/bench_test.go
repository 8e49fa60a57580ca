package image

import (
	"context"
	"path/filepath"
	"testing"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/random"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// benchImage is an image of 4 layers of 8 MiB of random (incompressible)
// file bytes each: 32 MiB unpacked, about as much to download.
func benchImage(b *testing.B) v1.Image {
	img := testImage(b, "bench")
	for range 4 {
		l, err := random.Layer(8<<20, types.OCILayer)
		if err != nil {
			b.Fatal(err)
		}
		if img, err = mutate.AppendLayers(img, l); err != nil {
			b.Fatal(err)
		}
	}
	return img
}

// BenchmarkFirstPull measures the first lease of an image on a node: pull
// from a registry (served in the process) and unpack into the cache.
func BenchmarkFirstPull(b *testing.B) {
	ref := push(b, testRegistry(b, nil), "bench/img:v1", benchImage(b))
	ctx := context.Background()
	b.SetBytes(32 << 20)
	for b.Loop() {
		c, err := OpenCache(filepath.Join(b.TempDir(), "images"), CacheOptions{})
		if err != nil {
			b.Fatal(err)
		}
		img, err := Puller{}.Pull(ctx, ref)
		if err != nil {
			b.Fatal(err)
		}
		rf, err := c.Get(ctx, img)
		if err != nil || !rf.Pulled {
			b.Fatal(err)
		}
		rf.Release()
	}
}

// BenchmarkCachedLease measures a later lease of a cached image: the
// manifest and config are fetched, nothing is downloaded or unpacked.
func BenchmarkCachedLease(b *testing.B) {
	ref := push(b, testRegistry(b, nil), "bench/img:v1", benchImage(b))
	ctx := context.Background()
	c := openCache(b, CacheOptions{})
	img, err := Puller{}.Pull(ctx, ref)
	if err != nil {
		b.Fatal(err)
	}
	rf, err := c.Get(ctx, img)
	if err != nil {
		b.Fatal(err)
	}
	rf.Release()
	for b.Loop() {
		img, err := Puller{}.Pull(ctx, ref)
		if err != nil {
			b.Fatal(err)
		}
		rf, err := c.Get(ctx, img)
		if err != nil || rf.Pulled {
			b.Fatal(err)
		}
		rf.Release()
	}
}
