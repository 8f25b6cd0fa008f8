// Package rocksshared locks a key of a RocksDB pessimistic transaction in the mode the caller
// chooses. grocksdb v1.7.15's Transaction.GetForUpdate always passes exclusive=1 to RocksDB's C
// function rocksdb_transaction_get_for_update, so RocksDB's shared GetForUpdate
// (exclusive=false) needs a call of its own, which GetForUpdate here is.
//
// grocksdb keeps the C pointers of a Transaction and of ReadOptions in unexported fields and has
// no accessor for them. This package reads each from its struct's first field, having checked
// with reflect, once, that the field is the C pointer it expects (its name, offset and C type),
// so that a grocksdb laid out otherwise fails every call with ErrLayout instead of handing C a
// wrong pointer.
package rocksshared

/*
#cgo LDFLAGS: -lrocksdb
#include <malloc.h>
#include <stdlib.h>
#include <rocksdb/c.h>
*/
import "C"

import (
	"errors"
	"fmt"
	"reflect"
	"unsafe"

	"github.com/linxGnu/grocksdb"
)

// ErrLayout is returned by every call when grocksdb's Transaction or ReadOptions does not hold
// its C pointer where this package reads it.
var ErrLayout = errors.New("rocksshared: grocksdb's Transaction or ReadOptions is not laid out as expected")

// layoutErr is nil when both structs hold their C pointer as their first field, else an error
// matching ErrLayout that says which one does not.
var layoutErr = errors.Join(
	checkLayout(reflect.TypeFor[grocksdb.Transaction](), "_Ctype_struct_rocksdb_transaction_t"),
	checkLayout(reflect.TypeFor[grocksdb.ReadOptions](), "_Ctype_struct_rocksdb_readoptions_t"),
)

// checkLayout reports whether t's first field is grocksdb's pointer c to the C struct cType.
func checkLayout(t reflect.Type, cType string) error {
	if t.NumField() > 0 {
		f := t.Field(0)
		if f.Name == "c" && f.Offset == 0 && f.Type.Kind() == reflect.Pointer && f.Type.Elem().Name() == cType {
			return nil
		}
	}
	return fmt.Errorf("%w: %v has no first field c *%s", ErrLayout, t, cType)
}

// GetForUpdate reads key in txn and locks it until txn commits or rolls back: exclusively when
// exclusive is true, as grocksdb's Transaction.GetForUpdate does, else shared, so that other
// transactions may lock it shared too but none exclusively. It appends the value to dst and
// returns it, with found false (and dst unchanged) when the key does not exist; RocksDB locks a
// missing key all the same.
//
// On failure (a lock timeout, a deadlock, ErrLayout, a nil argument) it returns the error, with
// RocksDB's message as grocksdb gives it, and the key is not locked by this call. The value and
// the error message RocksDB allocates are freed before it returns.
func GetForUpdate(dst []byte, txn *grocksdb.Transaction, ro *grocksdb.ReadOptions, key []byte, exclusive bool) (value []byte, found bool, err error) {
	if layoutErr != nil {
		return dst, false, layoutErr
	}
	if txn == nil || ro == nil {
		return dst, false, errors.New("rocksshared: GetForUpdate with a nil Transaction or ReadOptions")
	}
	// Each struct's first field is its C pointer (checked in layoutErr).
	ctxn := *(**C.rocksdb_transaction_t)(unsafe.Pointer(txn))
	cro := *(**C.rocksdb_readoptions_t)(unsafe.Pointer(ro))
	if ctxn == nil || cro == nil {
		return dst, false, errors.New("rocksshared: GetForUpdate with a destroyed Transaction or ReadOptions")
	}
	var excl C.uchar
	if exclusive {
		excl = 1
	}
	var (
		vlen C.size_t
		cerr *C.char
	)
	// RocksDB copies the key before it returns, so the Go memory is passed as it is.
	cv := C.rocksdb_transaction_get_for_update(ctxn, cro, (*C.char)(unsafe.Pointer(unsafe.SliceData(key))),
		C.size_t(len(key)), &vlen, excl, &cerr)
	if cerr != nil {
		err = errors.New(C.GoString(cerr))
		C.rocksdb_free(unsafe.Pointer(cerr))
		if cv != nil { // not returned with an error, but freed if it were
			C.rocksdb_free(unsafe.Pointer(cv))
		}
		return dst, false, err
	}
	if cv == nil {
		return dst, false, nil
	}
	value = append(dst, unsafe.Slice((*byte)(unsafe.Pointer(cv)), int(vlen))...)
	C.rocksdb_free(unsafe.Pointer(cv))
	return value, true, nil
}

// cHeapInUse is the C heap in use, in bytes, over every malloc arena: what the tests read to
// see that GetForUpdate frees what RocksDB allocates for it.
func cHeapInUse() uint64 { return uint64(C.mallinfo2().uordblks) }
