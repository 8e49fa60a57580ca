//go:build linux

package netstack

import (
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"sync"

	"golang.org/x/sys/unix"
	"gvisor.dev/gvisor/pkg/buffer"
	"gvisor.dev/gvisor/pkg/tcpip"
	"gvisor.dev/gvisor/pkg/tcpip/header"
	"gvisor.dev/gvisor/pkg/tcpip/stack"
)

// vnetHdrLen is the size of the virtio-net header that precedes every
// packet on a TUN device opened with IFF_VNET_HDR (struct virtio_net_hdr).
const vnetHdrLen = 10

const (
	vnetNeedsCsum = 1 // VIRTIO_NET_HDR_F_NEEDS_CSUM
	vnetGSONone   = 0
	vnetGSOTCPv4  = 1
	vnetGSOTCPv6  = 4
)

// tunLink is the stack's end of the TUN device. It differs from gVisor's
// fdbased endpoint in what makes a stream cheap over this link:
//
//   - The device carries a virtio-net header (IFF_VNET_HDR) with checksum
//     offload on (TUN_F_CSUM): the environment's kernel hands over TCP
//     segments of up to 64 KiB without summing them, and the stack's
//     segments go back with only their pseudo-header summed, which the
//     kernel takes as verified for local delivery. Neither side sums the
//     bytes of a stream, on either way.
//   - A packet read is delivered to the stack on the reading goroutine,
//     not handed to another one first: one wake-up less per packet.
//   - Reads and writes go through Go's poller (os.File), so closing the
//     device ends the reader without a stop descriptor.
type tunLink struct {
	f   *os.File
	raw interface {
		Write(func(fd uintptr) bool) error
	}
	mtu uint32

	mu         sync.RWMutex
	dispatcher stack.NetworkDispatcher
	wg         sync.WaitGroup
	closeOnce  sync.Once
}

var _ stack.LinkEndpoint = (*tunLink)(nil)
var _ stack.GSOEndpoint = (*tunLink)(nil)

// openTUNDevice makes the TUN device name in the calling thread's network
// namespace, with virtio-net headers and checksum offload.
func openTUNDevice(name string) (int, error) {
	fd, err := unix.Open("/dev/net/tun", unix.O_RDWR|unix.O_CLOEXEC, 0)
	if err != nil {
		return -1, err
	}
	ifr, err := unix.NewIfreq(name)
	if err != nil {
		unix.Close(fd)
		return -1, err
	}
	ifr.SetUint16(unix.IFF_TUN | unix.IFF_NO_PI | unix.IFF_VNET_HDR)
	if err := unix.IoctlIfreq(fd, unix.TUNSETIFF, ifr); err != nil {
		unix.Close(fd)
		return -1, fmt.Errorf("TUNSETIFF: %w", err)
	}
	if err := unix.IoctlSetInt(fd, unix.TUNSETOFFLOAD, unix.TUN_F_CSUM); err != nil {
		unix.Close(fd)
		return -1, fmt.Errorf("TUNSETOFFLOAD: %w", err)
	}
	return fd, nil
}

// newTUNLink takes fd, a TUN device opened by openTUNDevice; the link owns
// it from then on.
func newTUNLink(fd int, mtu uint32) (*tunLink, error) {
	if err := unix.SetNonblock(fd, true); err != nil {
		unix.Close(fd)
		return nil, err
	}
	f := os.NewFile(uintptr(fd), LinkName)
	raw, err := f.SyscallConn()
	if err != nil {
		f.Close()
		return nil, err
	}
	return &tunLink{f: f, raw: raw, mtu: mtu}, nil
}

func (l *tunLink) MTU() uint32                             { return l.mtu }
func (l *tunLink) SetMTU(mtu uint32)                       { l.mtu = mtu }
func (l *tunLink) MaxHeaderLength() uint16                 { return 0 }
func (l *tunLink) LinkAddress() tcpip.LinkAddress          { return "" }
func (l *tunLink) SetLinkAddress(tcpip.LinkAddress)        {}
func (l *tunLink) ARPHardwareType() header.ARPHardwareType { return header.ARPHardwareNone }
func (l *tunLink) AddHeader(*stack.PacketBuffer)           {}
func (l *tunLink) ParseHeader(*stack.PacketBuffer) bool    { return true }

// Capabilities: what the environment's kernel sends is taken as summed
// (see tunLink); the stack sums what it sends itself, except TCP, whose
// segments leave through GSO with the sum left to the kernel.
func (l *tunLink) Capabilities() stack.LinkEndpointCapabilities {
	return stack.CapabilityRXChecksumOffload
}

// GSOMaxSize keeps every segment within one packet of the link: the MTU
// is already as large as an IP packet goes, so there is nothing to
// segment, only the checksum to leave to the kernel.
func (l *tunLink) GSOMaxSize() uint32               { return l.mtu }
func (l *tunLink) SupportedGSO() stack.SupportedGSO { return stack.HostGSOSupported }

// SetOnCloseAction: the device goes away only when the boundary closes,
// which removes the NIC itself, so there is nothing to run.
func (l *tunLink) SetOnCloseAction(func()) {}

func (l *tunLink) IsAttached() bool {
	l.mu.RLock()
	defer l.mu.RUnlock()
	return l.dispatcher != nil
}

// Attach starts reading the device for d; Attach(nil) stops it.
func (l *tunLink) Attach(d stack.NetworkDispatcher) {
	l.mu.Lock()
	was := l.dispatcher
	l.dispatcher = d
	l.mu.Unlock()
	if d == nil {
		l.Close()
		return
	}
	if was == nil {
		l.wg.Add(1)
		go l.read()
	}
}

// Wait returns at once: the stack calls it holding its own lock, which
// the reader may be waiting for to deliver a packet that arrived as the
// stack closed. The boundary waits for the reader after the stack is done
// (waitReader).
func (l *tunLink) Wait() {}

// waitReader waits until the reader has ended, after Close.
func (l *tunLink) waitReader() { l.wg.Wait() }

// Close closes the device, which ends the reader.
func (l *tunLink) Close() {
	l.closeOnce.Do(func() { l.f.Close() })
}

// read delivers each packet the environment sends until the device is
// closed.
func (l *tunLink) read() {
	defer l.wg.Done()
	for {
		v := buffer.NewViewSize(vnetHdrLen + int(l.mtu))
		n, err := l.f.Read(v.AsSlice())
		if err != nil {
			v.Release()
			if errors.Is(err, os.ErrClosed) || errors.Is(err, unix.EBADFD) || errors.Is(err, unix.EIO) {
				return
			}
			continue
		}
		if n <= vnetHdrLen {
			v.Release()
			continue
		}
		v.CapLength(n)
		v.TrimFront(vnetHdrLen)
		var proto tcpip.NetworkProtocolNumber
		switch header.IPVersion(v.AsSlice()) {
		case header.IPv4Version:
			proto = header.IPv4ProtocolNumber
		case header.IPv6Version:
			proto = header.IPv6ProtocolNumber
		default:
			v.Release()
			continue
		}
		pkt := stack.NewPacketBuffer(stack.PacketBufferOptions{Payload: buffer.MakeWithView(v)})
		pkt.RXChecksumValidated = true
		l.mu.RLock()
		d := l.dispatcher
		l.mu.RUnlock()
		if d != nil {
			d.DeliverNetworkPacket(proto, pkt)
		}
		pkt.DecRef()
		if d == nil {
			return
		}
	}
}

// WritePackets writes each packet with its virtio-net header. A packet
// the device cannot take now is dropped, as a full queue drops it: TCP
// sends it again.
func (l *tunLink) WritePackets(pkts stack.PacketBufferList) (int, tcpip.Error) {
	var hdr [vnetHdrLen]byte
	iov := make([][]byte, 0, 8)
	n := 0
	for _, pkt := range pkts.AsSlice() {
		vnetHeader(hdr[:], pkt)
		iov = append(iov[:0], hdr[:])
		iov = append(iov, pkt.AsSlices()...)
		var werr error
		err := l.raw.Write(func(fd uintptr) bool {
			_, werr = unix.Writev(int(fd), iov)
			return true
		})
		if err != nil {
			if n == 0 {
				return 0, &tcpip.ErrClosedForSend{}
			}
			return n, nil
		}
		if werr != nil && !errors.Is(werr, unix.EAGAIN) {
			if n == 0 {
				return 0, &tcpip.ErrAborted{}
			}
			return n, nil
		}
		n++
	}
	return n, nil
}

// vnetHeader fills h for pkt: for a TCP segment whose checksum the stack
// left to the link, where the sum starts and where it goes; for anything
// else, nothing (the packet is complete).
func vnetHeader(h []byte, pkt *stack.PacketBuffer) {
	clear(h)
	g := pkt.GSOOptions
	if g.Type == stack.GSONone || !g.NeedsCsum {
		return
	}
	h[0] = vnetNeedsCsum
	h[1] = vnetGSONone
	if size := pkt.Data().Size(); g.MSS != 0 && size > int(g.MSS) {
		switch g.Type {
		case stack.GSOTCPv4:
			h[1] = vnetGSOTCPv4
		case stack.GSOTCPv6:
			h[1] = vnetGSOTCPv6
		}
		binary.LittleEndian.PutUint16(h[4:], g.MSS)
	}
	binary.LittleEndian.PutUint16(h[2:], uint16(pkt.HeaderSize()))
	binary.LittleEndian.PutUint16(h[6:], g.L3HdrLen)
	binary.LittleEndian.PutUint16(h[8:], g.CsumOffset)
}
