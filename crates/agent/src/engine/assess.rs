//! The risk step of [`Engine::step`]: in a round where some GPU is due to be scored, every
//! GPU's windows and signals summarised once, the node's median once, each due GPU assessed
//! and its held evidence written back; the others repeat their last assessment.

use super::risk;
use super::slots::Scratch;
use super::{Engine, GpuFindings};
use crate::model::Snapshot;

impl Engine {
    /// Risk needs every GPU's windows updated first: features compare each GPU with the
    /// node's median GPU. Each GPU's windows are summarised (into `scratch.summaries`) and
    /// its signals computed once here, shared by its features, its findings, the peers'
    /// comparison and the capacity advice; the node's median is taken once per round; the
    /// held evidence is written back. A GPU is scored at its first sample of each minute and
    /// whenever a sample brings news ([`risk::Cadence`]); otherwise its findings repeat its
    /// last assessment, and a round in which no GPU is due computes no signals at all.
    /// `repeated`: a GPU is listed twice in the snapshot (its first sample is its sample).
    pub(super) fn assess_risk(
        &mut self,
        now: i64,
        snapshot: &Snapshot,
        gpus: &mut [GpuFindings],
        scratch: &mut Scratch,
        repeated: bool,
    ) {
        let states = &mut self.state.gpus;
        let listed = snapshot.gpus.len();
        // Findings list the snapshot's GPUs first, in its order.
        let sample_of = |i: usize, finding: &GpuFindings| match (i < listed, repeated) {
            (false, _) => None,
            (true, false) => snapshot.gpus.get(i),
            (true, true) => snapshot.gpu_by_uuid(&finding.uuid),
        };
        scratch.due.clear();
        scratch
            .due
            .extend(
                gpus.iter()
                    .zip(&scratch.slots)
                    .enumerate()
                    .map(|(i, (finding, &slot))| {
                        let sample = sample_of(i, finding);
                        repeated || states.slot(slot).risk.cadence.due(now, sample)
                    }),
            );
        let scoring = scratch.due.contains(&true);
        // Written over the summaries of the step before, in place. A round that scores
        // nobody needs only the last hour (the capacity advice reads it).
        scratch
            .summaries
            .resize_with(scratch.slots.len(), Default::default);
        for (summaries, &slot) in scratch.summaries.iter_mut().zip(&scratch.slots) {
            let windows = &mut states.slot_mut(slot).windows;
            match scoring {
                true => windows.summaries_into(now, summaries),
                false => windows.hour_into(now, &mut summaries.hour),
            }
        }
        if !scoring {
            for (finding, &slot) in gpus.iter_mut().zip(&scratch.slots) {
                if let Some((last, uncorrectable)) = states.slot(slot).risk.cadence.last() {
                    finding.risk.clone_from(last);
                    finding.uncorrectable_ecc_24h = uncorrectable;
                }
            }
            return;
        }
        for (finding, windows) in gpus.iter_mut().zip(&scratch.summaries) {
            finding.uncorrectable_ecc_24h = windows.day.deltas.ecc_uncorrected;
        }
        scratch.signals.clear();
        scratch.signals.extend(
            gpus.iter()
                .zip(&scratch.slots)
                .zip(&scratch.summaries)
                .enumerate()
                .map(|(i, ((finding, &slot), windows))| {
                    risk::Signals::of(now, states.slot(slot), windows, sample_of(i, finding))
                }),
        );
        let signals = &scratch.signals;
        let peers = scratch.peers.median(signals.iter().map(|s| &s.shared));
        let model = self.config.risk_model.by_feature();
        for (i, ((((finding, &slot), windows), signals), &due)) in gpus
            .iter_mut()
            .zip(&scratch.slots)
            .zip(&scratch.summaries)
            .zip(signals)
            .zip(&scratch.due)
            .enumerate()
        {
            let state = states.slot_mut(slot);
            if !due {
                // Its uncorrectable count is the one just summarised.
                if let Some((last, _)) = state.risk.cadence.last() {
                    finding.risk.clone_from(last);
                }
                continue;
            }
            let mut hold = std::mem::take(&mut state.risk.hold);
            let sample = sample_of(i, finding);
            risk::assess_with(
                &model,
                &risk::RiskInput {
                    now,
                    state: states.slot(slot),
                    windows,
                    sample,
                    signals,
                    peers: &peers,
                },
                &mut hold,
                &mut finding.risk,
            );
            let state = states.slot_mut(slot);
            state.risk.hold = hold;
            (state.risk.cadence).scored(now, sample, &finding.risk, finding.uncorrectable_ecc_24h);
        }
    }
}
