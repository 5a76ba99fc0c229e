//! llama.cpp's summary statistics of a KL-divergence run.

use super::Position;

/// Accumulates [`Position`]s into llama.cpp's summary statistics.
#[derive(Clone, Debug, Default)]
pub struct KldStats {
    kld: Vec<f64>,
    p_diff: Vec<f64>,
    sum_nll: f64,
    sum_nll2: f64,
    sum_nll_base: f64,
    sum_nll_base2: f64,
    sum_nll_nll_base: f64,
    sum_kld: f64,
    sum_kld2: f64,
    sum_p_diff: f64,
    sum_p_diff2: f64,
    sum_p_diff4: f64,
    n_same_top: usize,
}

/// A mean and its uncertainty (standard error).
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Estimate {
    /// The mean.
    pub value: f64,
    /// Its standard error.
    pub unc: f64,
}

fn mean_unc(sum: f64, sum2: f64, n: usize) -> Estimate {
    if n == 0 {
        return Estimate::default();
    }
    let f = sum / n as f64;
    let df = sum2 / n as f64 - f * f;
    let unc = if df > 0.0 && n > 10 {
        (df / (n - 1) as f64).sqrt()
    } else {
        0.0
    };
    Estimate { value: f, unc }
}

/// `exp` of a mean log-likelihood, with its uncertainty carried through.
fn exp_of(l: Estimate) -> Estimate {
    let v = l.value.exp();
    Estimate {
        value: v,
        unc: v * l.unc,
    }
}

/// Linear interpolation between the sorted values (llama.cpp's percentile).
fn percentile(sorted: &[f64], fraction: f64) -> f64 {
    if fraction <= 0.0 {
        return sorted[0];
    }
    if fraction >= 1.0 {
        return sorted[sorted.len() - 1];
    }
    let p = fraction * (sorted.len() - 1) as f64;
    let ip = p as usize;
    let t = p - ip as f64;
    (1.0 - t) * sorted[ip] + t * sorted[(ip + 1).min(sorted.len() - 1)]
}

fn median(sorted: &[f64]) -> f64 {
    let n = sorted.len();
    if n.is_multiple_of(2) {
        0.5 * (sorted[n / 2] + sorted[n / 2 - 1])
    } else {
        sorted[n / 2]
    }
}

impl KldStats {
    /// Adds one position.
    pub fn add(&mut self, p: Position) {
        self.kld.push(p.kld);
        self.p_diff.push(p.p_diff);
        self.sum_nll += p.nll;
        self.sum_nll2 += p.nll * p.nll;
        self.sum_nll_base += p.nll_base;
        self.sum_nll_base2 += p.nll_base * p.nll_base;
        self.sum_nll_nll_base += p.nll * p.nll_base;
        self.sum_kld += p.kld;
        self.sum_kld2 += p.kld * p.kld;
        self.sum_p_diff += p.p_diff;
        self.sum_p_diff2 += p.p_diff * p.p_diff;
        self.sum_p_diff4 += p.p_diff.powi(4);
        self.n_same_top += p.same_top as usize;
    }

    /// Positions added.
    pub fn count(&self) -> usize {
        self.kld.len()
    }

    /// Perplexity of the compared model.
    pub fn ppl(&self) -> Estimate {
        exp_of(mean_unc(self.sum_nll, self.sum_nll2, self.count()))
    }

    /// Perplexity of the base.
    pub fn ppl_base(&self) -> Estimate {
        exp_of(mean_unc(
            self.sum_nll_base,
            self.sum_nll_base2,
            self.count(),
        ))
    }

    /// Mean KL divergence.
    pub fn mean_kld(&self) -> Estimate {
        mean_unc(self.sum_kld, self.sum_kld2, self.count())
    }

    /// Mean ln(PPL(Q)/PPL(base)).
    pub fn ln_ppl_ratio(&self) -> Estimate {
        let n = self.count();
        let a = mean_unc(self.sum_nll, self.sum_nll2, n);
        let b = mean_unc(self.sum_nll_base, self.sum_nll_base2, n);
        let cov = self.log_ppl_cov();
        Estimate {
            value: a.value - b.value,
            unc: (a.unc * a.unc + b.unc * b.unc - 2.0 * cov).max(0.0).sqrt(),
        }
    }

    fn log_ppl_cov(&self) -> f64 {
        let n = self.count();
        if n < 10 {
            return 0.0;
        }
        let nf = n as f64;
        (self.sum_nll_nll_base / nf - (self.sum_nll / nf) * (self.sum_nll_base / nf)) / (nf - 1.0)
    }

    /// RMS of Δp.
    pub fn rms_p_diff(&self) -> Estimate {
        let m = mean_unc(self.sum_p_diff2, self.sum_p_diff4, self.count());
        let v = m.value.sqrt();
        Estimate {
            value: v,
            unc: if v > 0.0 { 0.5 / v * m.unc } else { 0.0 },
        }
    }

    /// Fraction of positions where both put the same token first.
    pub fn same_top(&self) -> Estimate {
        let n = self.count();
        if n < 2 {
            return Estimate::default();
        }
        let p = self.n_same_top as f64 / n as f64;
        Estimate {
            value: p,
            unc: (p * (1.0 - p) / (n - 1) as f64).sqrt(),
        }
    }

    /// The KL divergence at `fraction` (0 = minimum, 0.5 = median, 1 = maximum).
    pub fn kld_percentile(&self, fraction: f64) -> f64 {
        if self.kld.is_empty() {
            return 0.0;
        }
        let mut v = self.kld.clone();
        v.sort_by(f64::total_cmp);
        if fraction == 0.5 {
            median(&v)
        } else {
            percentile(&v, fraction)
        }
    }

    /// One line per chunk, as llama.cpp prints while it runs: chunk, PPL,
    /// ln(PPL(Q)/PPL(base)), KL divergence, Δp RMS, same top p.
    pub fn progress_line(&self, chunk: usize) -> String {
        let (p, r, k, d, s) = (
            self.ppl(),
            self.ln_ppl_ratio(),
            self.mean_kld(),
            self.rms_p_diff(),
            self.same_top(),
        );
        format!(
            "{chunk:4}    {:9.4} ± {:9.4}    {:10.5} ± {:10.5}    {:10.5} ± {:10.5}    {:6.3} ± {:6.3} %    {:6.3} ± {:6.3} %",
            p.value,
            p.unc,
            r.value,
            r.unc,
            k.value,
            k.unc,
            100.0 * d.value,
            100.0 * d.unc,
            100.0 * s.value,
            100.0 * s.unc
        )
    }
}

impl std::fmt::Display for KldStats {
    /// llama.cpp's final summary (perplexity, KL divergence and token
    /// probability statistics), same labels and order.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let n = self.count();
        if n == 0 {
            return writeln!(f, "no position scored");
        }
        let (ppl, base) = (self.ppl(), self.ppl_base());
        let la = mean_unc(self.sum_nll, self.sum_nll2, n);
        let lb = mean_unc(self.sum_nll_base, self.sum_nll_base2, n);
        let cov = self.log_ppl_cov();
        let ratio = self.ln_ppl_ratio();
        writeln!(f, "====== Perplexity statistics ======")?;
        writeln!(
            f,
            "Mean PPL(Q)                   : {:10.6} ± {:10.6}",
            ppl.value, ppl.unc
        )?;
        writeln!(
            f,
            "Mean PPL(base)                : {:10.6} ± {:10.6}",
            base.value, base.unc
        )?;
        let cor = if la.unc > 0.0 && lb.unc > 0.0 {
            cov / (la.unc * lb.unc)
        } else {
            0.0
        };
        writeln!(f, "Cor(ln(PPL(Q)), ln(PPL(base))): {:6.2}%", 100.0 * cor)?;
        writeln!(
            f,
            "Mean ln(PPL(Q)/PPL(base))     : {:10.6} ± {:10.6}",
            ratio.value, ratio.unc
        )?;
        let r = ratio.value.exp();
        writeln!(
            f,
            "Mean PPL(Q)/PPL(base)         : {:10.6} ± {:10.6}",
            r,
            r * ratio.unc
        )?;
        let ppl_cov = ppl.value * base.value * cov;
        writeln!(
            f,
            "Mean PPL(Q)-PPL(base)         : {:10.6} ± {:10.6}",
            ppl.value - base.value,
            (ppl.unc * ppl.unc + base.unc * base.unc - 2.0 * ppl_cov)
                .max(0.0)
                .sqrt()
        )?;
        writeln!(f)?;
        let mut kld = self.kld.clone();
        kld.sort_by(f64::total_cmp);
        let k = self.mean_kld();
        writeln!(f, "====== KL divergence statistics ======")?;
        writeln!(f, "Mean    KLD: {:10.6} ± {:10.6}", k.value, k.unc)?;
        writeln!(f, "Maximum KLD: {:10.6}", kld[n - 1])?;
        for (label, frac) in [
            ("99.9%", 0.999),
            ("99.0%", 0.990),
            ("95.0%", 0.950),
            ("90.0%", 0.900),
        ] {
            writeln!(f, "{label}   KLD: {:10.6}", percentile(&kld, frac))?;
        }
        writeln!(f, "Median  KLD: {:10.6}", median(&kld))?;
        for (label, frac) in [
            ("10.0%", 0.100),
            (" 5.0%", 0.050),
            (" 1.0%", 0.010),
            (" 0.1%", 0.001),
        ] {
            writeln!(f, "{label}   KLD: {:10.6}", percentile(&kld, frac))?;
        }
        writeln!(f, "Minimum KLD: {:10.6}", kld[0])?;
        writeln!(f)?;
        let mut dp = self.p_diff.clone();
        dp.sort_by(f64::total_cmp);
        let m = mean_unc(self.sum_p_diff, self.sum_p_diff2, n);
        writeln!(f, "====== Token probability statistics ======")?;
        writeln!(
            f,
            "Mean    Δp: {:6.3} ± {:5.3} %",
            100.0 * m.value,
            100.0 * m.unc
        )?;
        writeln!(f, "Maximum Δp: {:6.3}%", 100.0 * dp[n - 1])?;
        for (label, frac) in [
            ("99.9%", 0.999),
            ("99.0%", 0.990),
            ("95.0%", 0.950),
            ("90.0%", 0.900),
            ("75.0%", 0.750),
        ] {
            writeln!(f, "{label}   Δp: {:6.3}%", 100.0 * percentile(&dp, frac))?;
        }
        writeln!(f, "Median  Δp: {:6.3}%", 100.0 * median(&dp))?;
        for (label, frac) in [
            ("25.0%", 0.250),
            ("10.0%", 0.100),
            (" 5.0%", 0.050),
            (" 1.0%", 0.010),
            (" 0.1%", 0.001),
        ] {
            writeln!(f, "{label}   Δp: {:6.3}%", 100.0 * percentile(&dp, frac))?;
        }
        writeln!(f, "Minimum Δp: {:6.3}%", 100.0 * dp[0])?;
        let rms = self.rms_p_diff();
        writeln!(
            f,
            "RMS Δp    : {:6.3} ± {:5.3} %",
            100.0 * rms.value,
            100.0 * rms.unc
        )?;
        let s = self.same_top();
        writeln!(
            f,
            "Same top p: {:6.3} ± {:5.3} %",
            100.0 * s.value,
            100.0 * s.unc
        )
    }
}
