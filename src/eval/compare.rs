//! Comparing a candidate's outputs with the reference's: every element, per-dtype tolerances,
//! a magnitude guard so "return zeros" cannot pass on problems whose outputs are tiny, and the
//! facts a repair prompt needs (max errors, mismatch count, first mismatching indices, NaN/Inf).
//! Pure tensor code: it runs on CPU tensors in tests and on GPU tensors in the worker.

use serde::{Deserialize, Serialize};
use tch::{Kind, Tensor};

/// Absolute and relative tolerance for one dtype (DESIGN.md §4).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Tolerance {
    pub atol: f64,
    pub rtol: f64,
}

impl Tolerance {
    /// fp32/fp64: 1e-4; fp16/bf16: 1e-2; integers and bools: exact.
    pub fn for_kind(kind: Kind) -> Tolerance {
        match kind {
            Kind::Half | Kind::BFloat16 => Tolerance {
                atol: 1e-2,
                rtol: 1e-2,
            },
            Kind::Float | Kind::Double => Tolerance {
                atol: 1e-4,
                rtol: 1e-4,
            },
            _ => Tolerance {
                atol: 0.0,
                rtol: 0.0,
            },
        }
    }

    /// This tolerance scaled (a user's `--tolerance` factor).
    pub fn scaled(self, factor: f64) -> Tolerance {
        Tolerance {
            atol: self.atol * factor,
            rtol: self.rtol * factor,
        }
    }
}

/// The magnitude guard's bound on ‖out − ref‖ / ‖ref‖ when the reference is tiny.
pub const GUARD_RELATIVE_L2: f64 = 1e-2;

/// How one output compared.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct OutputComparison {
    pub index: usize,
    pub shape: Vec<i64>,
    pub dtype: String,
    pub passed: bool,
    // Errors are infinite where the candidate left NaN (poison) behind, and JSON has no
    // infinity: these fields are written as "inf"/"NaN" strings when not finite.
    #[serde(with = "nonfinite")]
    pub max_abs_err: f64,
    #[serde(with = "nonfinite")]
    pub max_rel_err: f64,
    /// ‖out − ref‖₂ / ‖ref‖₂ (0 when both are zero).
    #[serde(with = "nonfinite")]
    pub relative_l2_err: f64,
    pub mismatches: i64,
    pub elements: i64,
    /// Up to five multi-dimensional indices of mismatching elements, in order.
    pub first_mismatches: Vec<Vec<i64>>,
    /// Candidate value and reference value at the first mismatches.
    #[serde(with = "nonfinite::pairs")]
    pub mismatch_values: Vec<(f64, f64)>,
    pub candidate_nan: i64,
    pub candidate_inf: i64,
    pub reference_nan: i64,
    /// Whether the magnitude guard applied (reference tiny or constant) and what it found.
    pub magnitude_guard: Option<String>,
    pub tolerance: Tolerance,
}

/// serde for f64 values that may be NaN or ±∞, which JSON cannot hold: written as the strings
/// "NaN", "inf" and "-inf", read back from those or from numbers.
mod nonfinite {
    use serde::{Deserialize, Deserializer, Serialize, Serializer};

    #[derive(Serialize, Deserialize)]
    #[serde(untagged)]
    enum Repr {
        Number(f64),
        Text(String),
    }

    fn to_repr(v: f64) -> Repr {
        if v.is_finite() {
            Repr::Number(v)
        } else if v.is_nan() {
            Repr::Text("NaN".into())
        } else if v > 0.0 {
            Repr::Text("inf".into())
        } else {
            Repr::Text("-inf".into())
        }
    }

    fn from_repr<E: serde::de::Error>(r: Repr) -> Result<f64, E> {
        match r {
            Repr::Number(v) => Ok(v),
            Repr::Text(t) => match t.as_str() {
                "NaN" | "nan" => Ok(f64::NAN),
                "inf" | "+inf" => Ok(f64::INFINITY),
                "-inf" => Ok(f64::NEG_INFINITY),
                other => Err(E::custom(format!("not a number: {other:?}"))),
            },
        }
    }

    pub fn serialize<S: Serializer>(v: &f64, s: S) -> Result<S::Ok, S::Error> {
        to_repr(*v).serialize(s)
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<f64, D::Error> {
        from_repr(Repr::deserialize(d)?)
    }

    pub mod pairs {
        use super::*;

        pub fn serialize<S: Serializer>(v: &[(f64, f64)], s: S) -> Result<S::Ok, S::Error> {
            let pairs: Vec<(Repr, Repr)> =
                v.iter().map(|(a, b)| (to_repr(*a), to_repr(*b))).collect();
            pairs.serialize(s)
        }

        pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<(f64, f64)>, D::Error> {
            Vec::<(Repr, Repr)>::deserialize(d)?
                .into_iter()
                .map(|(a, b)| Ok((from_repr(a)?, from_repr(b)?)))
                .collect()
        }
    }
}

fn is_floating(kind: Kind) -> bool {
    matches!(
        kind,
        Kind::Float | Kind::Double | Kind::Half | Kind::BFloat16
    )
}

fn scalar(t: &Tensor) -> f64 {
    t.double_value(&[])
}

fn count(mask: &Tensor) -> i64 {
    mask.sum(Kind::Int64).int64_value(&[])
}

/// The first `n` positions where a flat boolean tensor is true, scanning in chunks so a mask of
/// a billion mismatches never materialises a billion indices.
fn first_true_indices(flat: &Tensor, n: usize) -> Vec<i64> {
    const CHUNK: i64 = 1 << 24;
    let total = flat.size()[0];
    let mut found = Vec::new();
    let mut start = 0;
    while start < total && found.len() < n {
        let len = CHUNK.min(total - start);
        let chunk = flat.narrow(0, start, len);
        if count(&chunk) > 0 {
            let idx = chunk.nonzero().flatten(0, -1);
            let take = (n - found.len()).min(idx.size()[0] as usize) as i64;
            let idx = idx.narrow(0, 0, take).to_device(tch::Device::Cpu);
            for k in 0..take {
                found.push(start + idx.int64_value(&[k]));
            }
        }
        start += len;
    }
    found
}

/// A flat (row-major) index as coordinates in `shape`.
fn unravel(mut flat: i64, shape: &[i64]) -> Vec<i64> {
    let mut coords = vec![0; shape.len()];
    for (d, size) in shape.iter().enumerate().rev() {
        if *size > 0 {
            coords[d] = flat % size;
            flat /= size;
        }
    }
    coords
}

/// Compares `candidate` with `reference` element by element.
pub fn compare(
    index: usize,
    candidate: &Tensor,
    reference: &Tensor,
    tol: Tolerance,
) -> OutputComparison {
    let kind = reference.kind();
    let shape = reference.size();
    let elements = reference.numel() as i64;
    let mut result = OutputComparison {
        index,
        shape: shape.clone(),
        dtype: format!("{kind:?}").to_lowercase(),
        passed: false,
        max_abs_err: 0.0,
        max_rel_err: 0.0,
        relative_l2_err: 0.0,
        mismatches: 0,
        elements,
        first_mismatches: Vec::new(),
        mismatch_values: Vec::new(),
        candidate_nan: 0,
        candidate_inf: 0,
        reference_nan: 0,
        magnitude_guard: None,
        tolerance: tol,
    };
    if candidate.size() != shape || candidate.kind() != kind {
        result.mismatches = elements;
        result.magnitude_guard = Some(format!(
            "candidate output is {:?} {:?}, reference is {:?} {:?}",
            candidate.kind(),
            candidate.size(),
            kind,
            shape
        ));
        return result;
    }
    if elements == 0 {
        result.passed = true;
        return result;
    }
    // Work in the output's own precision (fp32 for half types): the tensors can be gigabytes,
    // and only sums need double accumulation.
    let work = |t: &Tensor| {
        if matches!(kind, Kind::Half | Kind::BFloat16) {
            t.to_kind(Kind::Float)
        } else {
            t.shallow_clone()
        }
    };
    let (mismatch, diff_abs, ref_abs) = if is_floating(kind) {
        let c = work(candidate);
        let r = work(reference);
        result.candidate_nan = count(&c.isnan());
        result.candidate_inf = count(&c.isinf());
        result.reference_nan = count(&r.isnan());
        // NaN where the reference has NaN is a match; NaN elsewhere is not (equal_nan only
        // pairs NaN with NaN).
        let close = c.isclose(&r, tol.rtol, tol.atol, true);
        let diff = (&c - &r).abs_().nan_to_num_(f64::INFINITY, None, None);
        (
            close.logical_not(),
            diff,
            r.abs().nan_to_num_(0.0, None, None),
        )
    } else {
        let c = candidate.to_kind(Kind::Int64);
        let r = reference.to_kind(Kind::Int64);
        let diff = (&c - &r).abs_().to_kind(Kind::Float);
        (c.ne_tensor(&r), diff, r.abs().to_kind(Kind::Float))
    };
    result.mismatches = count(&mismatch);
    result.max_abs_err = scalar(&diff_abs.max());
    // Relative error only where the reference is not ~zero, where it means something.
    let meaningful = ref_abs.gt(tol.atol.max(1e-12));
    result.max_rel_err = if count(&meaningful) > 0 {
        let rel =
            (&diff_abs / ref_abs.clamp_min(1e-12)).where_self(&meaningful, &diff_abs.zeros_like());
        scalar(&rel.max())
    } else {
        0.0
    };
    let ref_norm = scalar(&ref_abs.square().sum(Kind::Double).sqrt());
    let diff_norm = scalar(&diff_abs.clamp_max(1e18).square().sum(Kind::Double).sqrt());
    result.relative_l2_err = if ref_norm > 0.0 {
        diff_norm / ref_norm
    } else if diff_norm > 0.0 {
        f64::INFINITY
    } else {
        0.0
    };
    if result.mismatches > 0 {
        let flat_c = candidate.flatten(0, -1);
        let flat_r = reference.flatten(0, -1);
        for flat in first_true_indices(&mismatch.flatten(0, -1), 5) {
            let coords = unravel(flat, &shape);
            result
                .mismatch_values
                .push((flat_c.double_value(&[flat]), flat_r.double_value(&[flat])));
            result.first_mismatches.push(coords);
        }
    }
    result.passed = result.mismatches == 0;
    // Magnitude guard: where every reference value is within atol of zero (or all equal),
    // allclose alone would accept zeros or a constant; require a relative L2 match as well.
    if is_floating(kind) && result.passed {
        let ref_max = scalar(&ref_abs.max());
        let ref_range = scalar(&reference.max()) - scalar(&reference.min());
        let tiny = ref_max <= 10.0 * tol.atol;
        let constant = ref_range == 0.0 && elements > 1;
        if (tiny || constant) && ref_norm > 0.0 {
            let ok = result.relative_l2_err <= GUARD_RELATIVE_L2;
            result.magnitude_guard = Some(format!(
                "reference is {} (max |ref| = {ref_max:.3e}); relative L2 error {:.3e} {} {GUARD_RELATIVE_L2:e}",
                if tiny { "tiny" } else { "constant" },
                result.relative_l2_err,
                if ok { "≤" } else { ">" }
            ));
            result.passed = ok;
        }
    }
    result
}

/// Whether two runs of the candidate on the same inputs agree: bitwise (`exact`) and within the
/// correctness tolerance (`within_tolerance`). Atomics may legitimately differ in the last bits;
/// a race or an uninitialised read usually differs by far more.
pub fn agreement(first: &Tensor, second: &Tensor, tol: Tolerance) -> (bool, bool) {
    if first.size() != second.size() || first.kind() != second.kind() {
        return (false, false);
    }
    let exact = first.equal(second) || {
        // NaN != NaN under equal(); treat NaN in the same places as agreement.
        is_floating(first.kind())
            && first.isnan().equal(&second.isnan())
            && first
                .nan_to_num(0.0, None, None)
                .equal(&second.nan_to_num(0.0, None, None))
    };
    if exact {
        return (true, true);
    }
    let close = if is_floating(first.kind()) {
        first
            .isclose(second, tol.rtol, tol.atol, true)
            .all()
            .int64_value(&[])
            == 1
    } else {
        false
    };
    (false, close)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(values: &[f32]) -> Tensor {
        Tensor::from_slice(values)
    }

    #[test]
    fn identical_outputs_pass() {
        let r = Tensor::randn([4, 5], (Kind::Float, tch::Device::Cpu));
        let c = compare(0, &r.copy(), &r, Tolerance::for_kind(Kind::Float));
        assert!(c.passed);
        assert_eq!(c.mismatches, 0);
        assert_eq!(c.max_abs_err, 0.0);
    }

    #[test]
    fn one_wrong_element_is_found_with_its_index() {
        let r = Tensor::ones([3, 4], (Kind::Float, tch::Device::Cpu));
        let c = r.copy();
        let _ = c.get(2).get(1).fill_(1.5);
        let cmp = compare(0, &c, &r, Tolerance::for_kind(Kind::Float));
        assert!(!cmp.passed);
        assert_eq!(cmp.mismatches, 1);
        assert_eq!(cmp.first_mismatches, vec![vec![2, 1]]);
        assert_eq!(cmp.mismatch_values, vec![(1.5, 1.0)]);
        assert!((cmp.max_abs_err - 0.5).abs() < 1e-9);
    }

    #[test]
    fn poison_nan_is_a_mismatch_and_counted() {
        let r = t(&[1.0, 2.0, 3.0]);
        let c = t(&[1.0, f32::NAN, 3.0]);
        let cmp = compare(0, &c, &r, Tolerance::for_kind(Kind::Float));
        assert!(!cmp.passed);
        assert_eq!(cmp.candidate_nan, 1);
        assert_eq!(cmp.mismatches, 1);
        assert!(cmp.max_abs_err.is_infinite());
    }

    /// Regression: an output left NaN makes the errors infinite, and the worker's result line
    /// failed to serialize, so the parent saw no answer and reported a timeout.
    #[test]
    fn infinite_errors_survive_json() {
        let r = t(&[1.0, 2.0, 3.0]);
        let c = t(&[1.0, f32::NAN, f32::INFINITY]);
        let cmp = compare(0, &c, &r, Tolerance::for_kind(Kind::Float));
        assert!(cmp.max_abs_err.is_infinite());
        let json = serde_json::to_string(&cmp).expect("a comparison with NaN/inf serializes");
        assert!(json.contains("\"inf\""), "{json}");
        let back: OutputComparison = serde_json::from_str(&json).unwrap();
        assert!(back.max_abs_err.is_infinite());
        assert!(back.mismatch_values[0].0.is_nan());
        assert_eq!(back.mismatch_values[1].0, f64::INFINITY);
        assert_eq!(back.mismatches, cmp.mismatches);
    }

    #[test]
    fn nan_where_the_reference_has_nan_matches() {
        let r = t(&[1.0, f32::NAN]);
        let c = t(&[1.0, f32::NAN]);
        assert!(compare(0, &c, &r, Tolerance::for_kind(Kind::Float)).passed);
    }

    #[test]
    fn tolerance_is_per_dtype() {
        let r = t(&[1.0, 2.0]);
        let c = t(&[1.00005, 2.0]);
        assert!(compare(0, &c, &r, Tolerance::for_kind(Kind::Float)).passed);
        let c = t(&[1.001, 2.0]);
        assert!(!compare(0, &c, &r, Tolerance::for_kind(Kind::Float)).passed);
        let rh = r.to_kind(Kind::Half);
        let ch = c.to_kind(Kind::Half);
        assert!(compare(0, &ch, &rh, Tolerance::for_kind(Kind::Half)).passed);
        let ri = Tensor::from_slice(&[1i64, 2, 3]);
        let ci = Tensor::from_slice(&[1i64, 2, 4]);
        let cmp = compare(0, &ci, &ri, Tolerance::for_kind(Kind::Int64));
        assert!(!cmp.passed);
        assert_eq!(cmp.first_mismatches, vec![vec![2]]);
    }

    #[test]
    fn zeros_fail_on_a_tiny_reference() {
        // Every element is within atol of zero, so allclose alone would accept zeros.
        let r = Tensor::randn([1000], (Kind::Float, tch::Device::Cpu)) * 1e-6;
        let zeros = r.zeros_like();
        let cmp = compare(0, &zeros, &r, Tolerance::for_kind(Kind::Float));
        assert_eq!(cmp.mismatches, 0, "allclose alone passes");
        assert!(!cmp.passed, "{:?}", cmp.magnitude_guard);
        assert!(cmp.magnitude_guard.unwrap().contains("tiny"));
        assert!(compare(0, &r.copy(), &r, Tolerance::for_kind(Kind::Float)).passed);
    }

    #[test]
    fn zeros_pass_when_the_reference_is_zero() {
        let r = Tensor::zeros([10], (Kind::Float, tch::Device::Cpu));
        assert!(compare(0, &r.copy(), &r, Tolerance::for_kind(Kind::Float)).passed);
    }

    #[test]
    fn shape_or_dtype_mismatch_fails() {
        let r = Tensor::zeros([2, 3], (Kind::Float, tch::Device::Cpu));
        let c = Tensor::zeros([3, 2], (Kind::Float, tch::Device::Cpu));
        assert!(!compare(0, &c, &r, Tolerance::for_kind(Kind::Float)).passed);
    }

    #[test]
    fn agreement_separates_bits_from_tolerance() {
        let a = t(&[1.0, 2.0]);
        assert_eq!(
            agreement(&a, &a.copy(), Tolerance::for_kind(Kind::Float)),
            (true, true)
        );
        let b = t(&[1.0, 2.000001]);
        assert_eq!(
            agreement(&a, &b, Tolerance::for_kind(Kind::Float)),
            (false, true)
        );
        let c = t(&[1.0, 3.0]);
        assert_eq!(
            agreement(&a, &c, Tolerance::for_kind(Kind::Float)),
            (false, false)
        );
    }
}
