//! Merging XIDs from NVML events and the kernel log so each error counts once.
//!
//! The two sources see the same errors differently. NVML's event wait returns only the last
//! XID when several arrive between waits, but names the GPU by UUID. The kernel log has
//! every XID with the driver's text, but names the GPU by PCI bus id. So:
//!
//! - a kernel-log XID is released at once: it is the complete source;
//! - an NVML XID is held for a short `hold`, waiting for its kernel-log twin (same GPU, same
//!   XID, within `window`); when the twin comes, the twin is kept, with the GPU identity the
//!   NVML event had, and the NVML copy is dropped; otherwise it is released on its own
//!   (the kernel log is off, unreadable, or lost the record);
//! - each event absorbs at most one twin from the other source, so three kernel-log XID 13s
//!   and NVML's one XID 13 make three, not one;
//! - XID 79 is special: a GPU falls off the bus once, and the driver logs it twice (the
//!   `Xid …: 79` line and the number-less "GPU has fallen off the bus" line), so all 79s of
//!   one GPU within `window` are one event, whatever their source.
//!
//! The deduper reads no clock: callers pass `now`, so it is deterministic under test and
//! replay.

use std::collections::VecDeque;
use std::time::Duration;

use chrono::{DateTime, TimeDelta, Utc};

use crate::model::{GpuSample, XidEvent, XidSource, normalize_pci_bus_id};

/// Most released events remembered for twin matching; bounds memory under a log flood.
const MAX_REMEMBERED: usize = 4096;

const FELL_OFF_THE_BUS: u32 = 79;

const MAX_SPAN: Duration = Duration::from_secs(24 * 3600);

/// Merges NVML and kernel-log XIDs; see the module documentation for the rules.
#[derive(Debug)]
pub(crate) struct XidDeduper {
    window: TimeDelta,
    hold: TimeDelta,
    /// NVML events waiting for a kernel-log twin.
    held: Vec<XidEvent>,
    /// Released events of either source, oldest first, kept for `window`.
    released: VecDeque<Released>,
    ready: Vec<XidEvent>,
}

#[derive(Debug)]
struct Released {
    at: DateTime<Utc>,
    gpu: GpuKey,
    xid: u32,
    source: XidSource,
    /// Already merged with its twin from the other source.
    paired: bool,
}

/// What identifies a GPU in an event: its bus id (normalised) and/or its UUID.
#[derive(Debug, Clone, PartialEq, Eq)]
struct GpuKey {
    bus: Option<String>,
    uuid: Option<String>,
}

impl GpuKey {
    fn of(e: &XidEvent) -> Self {
        Self {
            bus: e.pci_bus_id.as_deref().and_then(normalize_pci_bus_id),
            uuid: e.uuid.clone(),
        }
    }

    /// Same GPU when either identity is known on both sides and equal.
    fn same(&self, other: &GpuKey) -> bool {
        let eq =
            |a: &Option<String>, b: &Option<String>| matches!((a, b), (Some(a), Some(b)) if a == b);
        eq(&self.bus, &other.bus) || eq(&self.uuid, &other.uuid)
    }
}

impl Default for XidDeduper {
    /// A 30 s twin window and a 2 s hold for NVML events.
    fn default() -> Self {
        Self::new(Duration::from_secs(30), Duration::from_secs(2))
    }
}

impl XidDeduper {
    /// `window`: how far apart twins from the two sources may be. `hold`: how long an NVML
    /// event waits for its kernel-log twin before it is released alone. Both are capped at
    /// a day, far beyond any sensible setting.
    pub fn new(window: Duration, hold: Duration) -> Self {
        let cap = |d: Duration| TimeDelta::from_std(d.min(MAX_SPAN)).unwrap_or(TimeDelta::zero());
        Self {
            window: cap(window),
            hold: cap(hold),
            held: Vec::new(),
            released: VecDeque::new(),
            ready: Vec::new(),
        }
    }

    /// Offers one event from any source; [`drain`](Self::drain) returns what survives.
    pub fn push(&mut self, event: XidEvent) {
        match event.source {
            XidSource::Kmsg => self.push_kmsg(event),
            XidSource::Nvml => self.push_nvml(event),
            XidSource::Simulator => self.ready.push(event),
        }
    }

    /// Events ready to count, oldest first: every kernel-log and simulator event pushed so
    /// far, and NVML events whose hold ran out by `now`.
    pub fn drain(&mut self, now: DateTime<Utc>) -> Vec<XidEvent> {
        let mut i = 0;
        while i < self.held.len() {
            if later(self.held[i].at, self.hold) <= now {
                let e = self.held.remove(i);
                self.release(e, false);
            } else {
                i += 1;
            }
        }
        while self
            .released
            .front()
            .is_some_and(|r| later(later(r.at, self.window), self.hold) < now)
        {
            self.released.pop_front();
        }
        let mut out = std::mem::take(&mut self.ready);
        out.sort_by_key(|e| e.at);
        out
    }

    fn push_kmsg(&mut self, mut event: XidEvent) {
        let gpu = GpuKey::of(&event);
        let twin = self.held.iter().position(|h| {
            h.xid == event.xid && GpuKey::of(h).same(&gpu) && self.near(h.at, event.at)
        });
        let paired = if let Some(i) = twin {
            let nvml = self.held.remove(i);
            event.uuid = event.uuid.or(nvml.uuid);
            event.gpu = event.gpu.or(nvml.gpu);
            true
        } else if let Some(r) = self.released_twin(&event, &gpu, XidSource::Nvml) {
            // NVML's copy already went out (it outlived its hold): this is the same error.
            r.paired = true;
            return;
        } else {
            false
        };
        if self.already_fell_off(&event, &GpuKey::of(&event)) {
            return;
        }
        self.release(event, paired);
    }

    fn push_nvml(&mut self, event: XidEvent) {
        let gpu = GpuKey::of(&event);
        if let Some(r) = self.released_twin(&event, &gpu, XidSource::Kmsg) {
            r.paired = true;
            return;
        }
        if self.already_fell_off(&event, &gpu) {
            return;
        }
        self.held.push(event);
    }

    fn released_twin(
        &mut self,
        event: &XidEvent,
        gpu: &GpuKey,
        source: XidSource,
    ) -> Option<&mut Released> {
        let window = self.window;
        self.released.iter_mut().find(|r| {
            r.source == source
                && !r.paired
                && r.xid == event.xid
                && r.gpu.same(gpu)
                && (r.at - event.at).abs() <= window
        })
    }

    /// A GPU falls off the bus once; later 79s for it within the window are echoes.
    fn already_fell_off(&self, event: &XidEvent, gpu: &GpuKey) -> bool {
        event.xid == FELL_OFF_THE_BUS
            && self
                .released
                .iter()
                .any(|r| r.xid == FELL_OFF_THE_BUS && r.gpu.same(gpu) && self.near(r.at, event.at))
    }

    fn near(&self, a: DateTime<Utc>, b: DateTime<Utc>) -> bool {
        (a - b).abs() <= self.window
    }

    fn release(&mut self, event: XidEvent, paired: bool) {
        if self.released.len() >= MAX_REMEMBERED {
            self.released.pop_front();
        }
        self.released.push_back(Released {
            at: event.at,
            gpu: GpuKey::of(&event),
            xid: event.xid,
            source: event.source,
            paired,
        });
        self.ready.push(event);
    }
}

/// `t + d`, saturating: event times come from outside and may be anything.
fn later(t: DateTime<Utc>, d: TimeDelta) -> DateTime<Utc> {
    t.checked_add_signed(d).unwrap_or(DateTime::<Utc>::MAX_UTC)
}

/// Fills an event's `gpu` and `uuid` from the GPU whose PCI bus id it names (kernel-log
/// events name only the bus id). Leaves the event unchanged when no GPU matches.
pub(crate) fn resolve_gpu(event: &mut XidEvent, gpus: &[GpuSample]) {
    let Some(bus) = event.pci_bus_id.as_deref().and_then(normalize_pci_bus_id) else {
        return;
    };
    let found = gpus
        .iter()
        .find(|g| normalize_pci_bus_id(&g.pci_bus_id).as_deref() == Some(bus.as_str()));
    if let Some(g) = found {
        event.gpu = Some(g.index);
        event.uuid = Some(g.uuid.clone());
        event.pci_bus_id = Some(bus);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t0() -> DateTime<Utc> {
        DateTime::from_timestamp(1_767_225_600, 0).unwrap_or_default()
    }

    fn ms(n: i64) -> DateTime<Utc> {
        t0() + TimeDelta::milliseconds(n)
    }

    fn kmsg(at_ms: i64, bus: &str, xid: u32, text: &str) -> XidEvent {
        XidEvent {
            at: ms(at_ms),
            gpu: None,
            uuid: None,
            pci_bus_id: Some(bus.into()),
            xid,
            source: XidSource::Kmsg,
            message: Some(text.into()),
        }
    }

    /// NVML events as the NVML source makes them: UUID, index and NVML's bus id form.
    fn nvml(at_ms: i64, gpu: u32, xid: u32) -> XidEvent {
        XidEvent {
            at: ms(at_ms),
            gpu: Some(gpu),
            uuid: Some(format!("GPU-{gpu}")),
            pci_bus_id: Some(format!("00000000:{:02X}:00.0", 0x3b + gpu)),
            xid,
            source: XidSource::Nvml,
            message: None,
        }
    }

    fn xids(events: &[XidEvent]) -> Vec<u32> {
        events.iter().map(|e| e.xid).collect()
    }

    #[test]
    fn nvml_reporting_only_the_last_of_several_xids_adds_nothing() {
        let mut d = XidDeduper::default();
        d.push(kmsg(0, "0000:3b:00", 48, "DBE"));
        d.push(kmsg(1, "0000:3b:00", 63, "row remap"));
        d.push(kmsg(2, "0000:3b:00", 94, "Contained: ..."));
        d.push(nvml(40, 0, 94));
        let out = d.drain(ms(10_000));
        assert_eq!(xids(&out), vec![48, 63, 94]);
        assert!(out.iter().all(|e| e.source == XidSource::Kmsg));
        assert_eq!(out[2].message.as_deref(), Some("Contained: ..."));
    }

    #[test]
    fn nvml_first_then_kernel_log_keeps_the_log_text_and_nvml_identity() {
        let mut d = XidDeduper::default();
        d.push(nvml(0, 0, 119));
        assert!(
            d.drain(ms(500)).is_empty(),
            "NVML events wait for their twin"
        );
        d.push(kmsg(
            300,
            "0000:3b:00",
            119,
            "Timeout after 6s of waiting for RPC response",
        ));
        let out = d.drain(ms(5_000));
        assert_eq!(out.len(), 1);
        assert_eq!(out[0].source, XidSource::Kmsg);
        assert_eq!(out[0].uuid.as_deref(), Some("GPU-0"));
        assert_eq!(out[0].gpu, Some(0));
        assert!(
            out[0]
                .message
                .as_deref()
                .is_some_and(|m| m.starts_with("Timeout"))
        );
    }

    #[test]
    fn nvml_alone_is_released_after_the_hold() {
        let mut d = XidDeduper::new(Duration::from_secs(30), Duration::from_secs(2));
        d.push(nvml(0, 1, 13));
        assert!(d.drain(ms(1_999)).is_empty());
        let out = d.drain(ms(2_000));
        assert_eq!((xids(&out), out[0].source), (vec![13], XidSource::Nvml));
        assert!(d.drain(ms(60_000)).is_empty(), "released once");
    }

    #[test]
    fn repeated_kernel_log_xids_each_count_and_absorb_one_nvml_twin() {
        let mut d = XidDeduper::default();
        d.push(kmsg(0, "0000:3b:00", 13, "a"));
        d.push(kmsg(6_000, "0000:3b:00", 13, "b"));
        d.push(nvml(6_010, 0, 13));
        d.push(kmsg(12_000, "0000:3b:00", 13, "c"));
        let out = d.drain(ms(20_000));
        assert_eq!(xids(&out), vec![13, 13, 13]);
        assert!(out.iter().all(|e| e.source == XidSource::Kmsg));
    }

    #[test]
    fn late_kernel_log_twin_of_a_released_nvml_event_is_not_counted_again() {
        let mut d = XidDeduper::default();
        d.push(nvml(0, 0, 48));
        assert_eq!(d.drain(ms(3_000)).len(), 1);
        d.push(kmsg(1_000, "0000:3b:00.0", 48, "DBE"));
        assert!(d.drain(ms(4_000)).is_empty());
    }

    #[test]
    fn twins_must_be_the_same_gpu_and_within_the_window() {
        let mut d = XidDeduper::default();
        d.push(nvml(0, 1, 31)); // bus 3C
        d.push(kmsg(10, "0000:3b:00", 31, "other GPU"));
        d.push(nvml(100_000, 0, 31));
        d.push(kmsg(140_000, "0000:3b:00", 31, "40 s later"));
        let out = d.drain(ms(200_000));
        assert_eq!(out.len(), 4, "{out:#?}");
    }

    #[test]
    fn a_gpu_falls_off_the_bus_once_whatever_the_sources_say() {
        let mut d = XidDeduper::default();
        d.push(nvml(0, 0, 79));
        d.push(kmsg(
            1,
            "0000:3b:00",
            79,
            "pid='<unknown>', name=<unknown>, GPU has fallen off the bus.",
        ));
        d.push(kmsg(2, "0000:3B:00.0", 79, "GPU has fallen off the bus."));
        d.push(kmsg(3, "0000:3c:00.0", 79, "GPU has fallen off the bus."));
        let out = d.drain(ms(5_000));
        assert_eq!(out.len(), 2, "{out:#?}");
        assert_eq!(out[0].uuid.as_deref(), Some("GPU-0"));
        assert!(
            out[0]
                .message
                .as_deref()
                .is_some_and(|m| m.starts_with("pid="))
        );
        assert_eq!(out[1].pci_bus_id.as_deref(), Some("0000:3c:00.0"));
        // A late NVML echo is dropped too.
        d.push(nvml(4_000, 0, 79));
        assert!(d.drain(ms(10_000)).is_empty());
    }

    #[test]
    fn uuid_matches_when_bus_ids_are_missing() {
        let mut d = XidDeduper::default();
        let mut k = kmsg(5, "0000:3b:00", 74, "NVLink");
        k.pci_bus_id = None;
        k.uuid = Some("GPU-0".into());
        let mut n = nvml(0, 0, 74);
        n.pci_bus_id = None;
        d.push(n);
        d.push(k);
        assert_eq!(d.drain(ms(5_000)).len(), 1);
    }

    #[test]
    fn extreme_times_and_durations_do_not_panic() {
        let mut d = XidDeduper::new(Duration::MAX, Duration::MAX);
        let mut e = nvml(0, 0, 13);
        e.at = DateTime::<Utc>::MAX_UTC;
        d.push(e.clone());
        e.at = DateTime::<Utc>::MIN_UTC;
        d.push(e);
        d.push(kmsg(0, "0000:3b:00", 13, "x"));
        assert_eq!(
            d.drain(DateTime::<Utc>::MAX_UTC).len(),
            3,
            "no twins that far apart"
        );
    }

    #[test]
    fn simulator_events_pass_through() {
        let mut d = XidDeduper::default();
        let mut e = nvml(0, 0, 79);
        e.source = XidSource::Simulator;
        d.push(e.clone());
        d.push(e);
        assert_eq!(d.drain(ms(0)).len(), 2);
    }

    #[test]
    fn memory_stays_bounded() {
        let mut d = XidDeduper::default();
        for i in 0..10_000 {
            d.push(kmsg(i, "0000:3b:00", 13, "flood"));
        }
        assert_eq!(d.drain(ms(10_000)).len(), 10_000);
        assert!(d.released.len() <= MAX_REMEMBERED);
        d.drain(ms(100_000));
        assert!(d.released.is_empty(), "old events are forgotten");
    }

    #[test]
    fn resolve_gpu_matches_bus_id_forms() {
        let gpus = vec![
            GpuSample {
                index: 3,
                uuid: "GPU-abc".into(),
                pci_bus_id: "00000000:3B:00.0".into(),
                ..Default::default()
            },
            GpuSample {
                index: 4,
                uuid: "GPU-def".into(),
                pci_bus_id: "00000000:3C:00.0".into(),
                ..Default::default()
            },
        ];
        let mut e = kmsg(0, "0000:3c:00", 79, "x");
        resolve_gpu(&mut e, &gpus);
        assert_eq!((e.gpu, e.uuid.as_deref()), (Some(4), Some("GPU-def")));
        assert_eq!(e.pci_bus_id.as_deref(), Some("0000:3C:00.0"));
        let mut e = kmsg(0, "0000:99:00", 79, "x");
        resolve_gpu(&mut e, &gpus);
        assert_eq!((e.gpu, e.uuid), (None, None));
    }
}
