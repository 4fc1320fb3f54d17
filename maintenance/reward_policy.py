"""The written policy of new_math_reward.py: what it demands of an answer beyond its value, one rule a row.

docs/reward_policy.md shows POLICY_RULES as a table (generated: ``python -m maintenance.sync_readme``) and
tests/unit/test_reward.py runs every rule's examples through compute_score: (question, boxed answer, gold, paid).
Sources: "MATH" is Hendrycks et al. 2021's answer conventions and grader (is_equiv: the answer string after
normalisation); "reference" the reference recipe's reward; "OpenCompass" its MATHVerifyEvaluator, i.e. math-verify
(value equality, sets unordered, float tolerance, a timeout). Where a rule trades false negatives against false
positives, it takes the side a policy model cannot farm: an answer that skips work the question asks for, or that GRPO
could learn to produce more cheaply than the answer, is not paid. The rules themselves are code in
new_math_reward.py's section 5; this file holds only their text and examples, which new_math_reward.py never reads.
"""

POLICY_RULES = (
    dict(rule="correct answer first", when="always",
         decision="Only a correct final answer earns; format and reasoning credit are paid on top of it, "
                  "never instead of it.",
         choice="–", source="reference (0.7 + 0.2 + 0.1); this recipe: 0 for a wrong answer whatever its format",
         examples=[("", "4", "4", True), ("", "5", "4", False)]),
    dict(rule="exact values", when="always; the question asks to round",
         decision="Decimals are exact values: 0.333 is not 1/3 and 3.14 is not \\pi. When the question asks to "
                  "round, the rounded value is the answer and may follow `\\approx`; `exact \\approx rounded` "
                  "states the exact value, or the rounded one, when the exact side rounds to the rounded one (a "
                  "rounding it does not round to is refused); the form the question asks for is that of the side "
                  "that states the gold (`\\frac{32\\sqrt{2}}{3} \\approx 15.08` is a decimal to the nearest "
                  "hundredth).",
         choice="Refuse approximations (FN on sloppy rounding): a tolerance would pay guesses near the value.",
         source="MATH (exact answers); OpenCompass pays values within math-verify's float tolerance",
         examples=[("", "0.333", "\\frac13", False),
                   ("Round your answer to the nearest hundredth.", "x \\approx 3.14", "3.14", True),
                   ("", "\\frac{1}{3} \\approx 0.33", "\\frac13", True),
                   ("", "\\frac{1}{3} \\approx 0.35", "\\frac13", False),
                   ("Express your answer as a decimal to the nearest hundredth.",
                    "\\frac{32\\sqrt{2}}{3} \\approx 15.08", "15.08", True),
                   ("Express your answer as a decimal to the nearest hundredth.", "\\frac{1}{2} \\approx 15.08",
                    "15.08", False)]),
    dict(rule="ordering words", when="the question says \"in increasing order\", \"from least to greatest\" and the "
                                     "like, or orders a product's factors (\"in the form $(ax^2+bx+c)(dx^2+ex+f)$, "
                                     "with $a<d$\")",
         decision="A list is compared in the order given, and such a product factor by factor in the gold's order; "
                  "without such words a list of solutions is unordered. "
                  "A strict chain (f(2) < f(1) < f(4)) states the list of its terms in the order written. When the "
                  "question asks for a comma-separated list, 70,110 is two numbers, not a thousands separator.",
         choice="Refuse another order (FN when a grader would be lenient): the order is part of the task.",
         source="MATH (the question states the answer's form); OpenCompass compares lists as sets and pays any order",
         examples=[("List the roots in increasing order.", "3, 1, -2", "-2, 1, 3", False),
                   ("List the roots in increasing order.", "-2, 1, 3", "-2,1,3", True),
                   ("Find all roots.", "3, 1, -2", "-2, 1, 3", True),
                   ("Enter all the solutions, separated by commas.", "110, 70", "70,110", True),
                   ("Submit your answer in the form $(ax^2+bx+c)(dx^2+ex+f)$, with $a<d$.", "(4x^2+x+1)(-4x^2+x+1)",
                    "(-4x^2+x+1)(4x^2+x+1)", False)]),
    dict(rule="rationalised denominator", when="the question says \"rationalize\"",
         decision="An answer with a radical in a denominator is not paid (unless the gold has one); without the "
                  "word both forms are paid.",
         choice="Refuse (FN against a lenient grader): rationalising is the task, skipping it is farmable.",
         source="MATH (the requested form is the answer); OpenCompass pays any equal value",
         examples=[("Rationalize the denominator of $\\frac{1}{\\sqrt{2}}$.", "\\frac{1}{\\sqrt{2}}",
                    "\\frac{\\sqrt{2}}{2}", False),
                   ("Rationalize the denominator of $\\frac{3}{\\sqrt{5}+1}$.", "\\frac{3(\\sqrt{5}-1)}{4}",
                    "\\frac{3\\sqrt{5}-3}{4}", True),
                   ("", "\\frac{1}{\\sqrt{2}}", "\\frac{\\sqrt{2}}{2}", True)]),
    dict(rule="simplest radical form", when="the question says \"simplest radical form\"",
         decision="A root whose radicand's integer factor holds a power of the root's index (\\sqrt{8}, "
                  "\\sqrt{1260x} with its factor 36, \\sqrt[3]{16}), a radical in a denominator or a power with a "
                  "fractional exponent (x^{1/2}) is not paid (unless the gold has one).",
         choice="Refuse: simplifying the radical is the task.",
         source="MATH; OpenCompass pays any equal value",
         examples=[("Express your answer in simplest radical form.", "\\sqrt{8}", "2\\sqrt{2}", False),
                   ("Express your answer in simplest radical form.", "2\\sqrt{2}", "2\\sqrt2", True),
                   ("Express your answer in simplest radical form.", "6x\\sqrt{1260x}", "36x\\sqrt{35x}", False),
                   ("Express your answer in simplest radical form.", "36x\\sqrt{35x}", "36x \\sqrt{35x}", True),
                   ("Express your answer in simplest radical form.", "x^{1/2}", "\\sqrt{x}", False),
                   ("", "x^{1/2}", "\\sqrt{x}", True)]),
    dict(rule="stated form", when="the question names a form: \"(common / improper) fraction\", \"fraction in "
                                   "simplest form\", \"lowest terms\", \"mixed number\", \"as a decimal\", \"as a "
                                   "percent\", \"exponential notation\", \"simplify\", \"integer denominator\", "
                                   "\"(simplest) fractional form\", \"terms of decreasing degree\", "
                                   "\"interval notation\" (\"as an interval or a union of intervals\"), \"in the "
                                   "form y = mx + b\", a template (\"in the form $a\\sqrt{b}$\", "
                                   "\"$\\frac{a}{b}$\") (not when negated or offered as one of two forms)",
         decision="An answer of the right value in a form the named one rules out is not paid (unless the gold has "
                  "that form): for a fraction a decimal (also repeating), a percent, a mixed number, an unreduced "
                  "fraction, a ratio with a colon (1:10) or a negative power (z^{-1} for 1/z); "
                  "for a mixed number an improper fraction or a decimal; for a decimal a fraction; for a "
                  "percent the value as a fraction of one (0.25 for 25%); for exponential notation a number written "
                  "out; for \"simplify\" an unreduced fraction, a power factor under a root (as for simplest "
                  "radical form) or a radical in a denominator; for \"simplest form\" or \"lowest terms\" an "
                  "unreduced fraction or a power factor under a root (\\sqrt[3]{8} for 2); for interval notation "
                  "an inequality (also in set-builder notation); for \"y = ...\" an equation not solved for y; for "
                  "decreasing degree terms whose total degree rises from left to right. "
                  "One table (_DEMAND_FORBIDS) holds these.",
         choice="Refuse (FN against a lenient grader): the form is part of the task, as MATH grades it.",
         source="MATH (the requested form is the answer; its grader compares strings); OpenCompass pays any equal value",
         examples=[("Express your answer as a common fraction.", "\\frac{6}{8}", "\\frac34", False),
                   ("Express your answer as a common fraction.", "0.75", "\\frac34", False),
                   ("Express your answer as a common fraction.", "\\frac{3}{4}", "\\frac34", True),
                   ("Express your answer as an improper fraction.", "1\\frac{1}{2}", "\\frac32", False),
                   ("Express your answer as a mixed number.", "\\frac{31}{5}", "6\\frac15", False),
                   ("Express your answer as a mixed number.", "6 \\tfrac{1}{5}", "6\\frac15", True),
                   ("Express your answer as a decimal.", "\\frac{1}{2}", "0.5", False),
                   ("Express your answer as a percent.", "0.25", "25\\%", False),
                   ("Express your answer as a percent.", "25", "25\\%", True),
                   ("Simplify $\\sqrt{6}\\cdot\\sqrt{12}$.", "\\sqrt{72}", "6\\sqrt2", False),
                   ("Express in simplest form: $\\sqrt[12]{8^4}$", "\\sqrt[3]{8}", "2", False),
                   ("Express in simplest form: $\\sqrt[12]{8^4}$", "2", "2", True),
                   ("Express your answer in interval notation.", "-2 < x < 3", "(-2,3)", False),
                   ("Express your answer as an interval or as a union of intervals.", "0 \\le x < 1", "[0,1)", False),
                   ("Enter the equation of the line in the form \"$y = mx + b$\".", "2x + y = 0", "y = -2x", False),
                   ("Enter the equation of the line in the form \"$y = mx + b$\".", "y = -2x + 0", "y = -2x", True),
                   ("Give the endpoints as common fractions (not mixed numbers or decimals).", "\\frac{4}{3}",
                    "\\frac43", True),
                   ("", "0.75", "\\frac34", True), ("", "\\frac{6}{8}", "\\frac34", True),
                   ("Your answer should use exponential notation.", "1024", "2^{10}", False),
                   ("Express your answer as a common fraction.", "1:10", "\\frac{1}{10}", False),
                   ("", "1:10", "\\frac{1}{10}", True),
                   ("Express your answer in simplest fractional form.", "1.8", "\\frac9{5}", False),
                   ("Express your answer in interval notation.", "\\{y : -10 \\le y \\le 4\\}", "[-10,4]", False),
                   ("", "\\{x : |x| \\geq 5\\}", "(-\\infty,-5]\\cup[5,\\infty)", True),
                   ("Write the sum as a polynomial with terms of decreasing degree.", "-5+y+y^4", "y^4+y-5", False),
                   ("Write the sum as a polynomial with terms of decreasing degree.", "y^4+y-5", "y^4+y-5", True)]),
    dict(rule="normalised equation", when="the question fixes a normalisation (\"A > 0 and gcd(|A|,|B|,|C|,|D|) = 1\", "
                                           "\"a > 0, and a is as small as possible\", \"relatively prime\")",
         decision="Only the normalised equation is paid (sides may be swapped); without it any nonzero multiple of "
                  "the equation is paid.",
         choice="Refuse other multiples: the normalisation is part of the stated answer.",
         source="MATH (the question defines the answer); OpenCompass compares equations by value",
         examples=[("Enter your answer in the form $Ax + By + Cz + D = 0,$ where $A > 0$ and "
                    "$\\gcd(|A|,|B|,|C|,|D|) = 1.$", "-2x - 4y + 6z - 2 = 0", "x + 2y - 3z + 1 = 0", False),
                   ("Enter your answer in the form $Ax + By + Cz + D = 0,$ where $A > 0$ and "
                    "$\\gcd(|A|,|B|,|C|,|D|) = 1.$", "x + 2y - 3z + 1 = 0", "x+2y-3z+1=0", True),
                   ("Find the equation of the plane.", "-2x - 4y + 6z - 2 = 0", "x + 2y - 3z + 1 = 0", True),
                   ("Express your answer as $ax+by=c$, where $a$, $b$, and $c$ are integers, $a>0$, and $a$ is as "
                    "small as possible.", "8x-10y=-100", "4x-5y=-50", False)]),
    dict(rule="prompt echo", when="the question is known (extra_info[\"question\"]) or the response states the task",
         decision="A final answer that restates an expression the question asks to compute, evaluate, simplify, "
                  "expand, factor (or find, express, convert) is not paid; the gold as written always is.",
         choice="Refuse: an echo has the right value and does none of the work (a known reward hack).",
         source="this recipe's hack defence; MATH's answers are the simplified form; OpenCompass pays the echo",
         examples=[("Compute $\\dbinom{8}{4}$.", "\\binom{8}{4}", "70", False),
                   ("What is $2^3 \\cdot 3$?", "2^3 \\cdot 3", "24", False),
                   ("Compute $\\frac{1}{2}+\\frac{1}{4}$.", "\\frac{3}{4}", "\\frac34", True),
                   ("Simplify $\\frac{3}{4}$ plus zero.", "\\frac{3}{4}", "\\frac34", True)]),
    dict(rule="complete factorisation", when="the question asks to factor (the verb) and the gold is a product "
                                             "factored completely over the integers",
         decision="An answer equal to the gold is paid only when it is factored completely over the integers, up to "
                  "order, signs and numeric factors: every non-constant factor (a power of one allowed) a primitive "
                  "polynomial with integer coefficients, irreducible over Z. A gold not of that kind (radicals, not a "
                  "polynomial) turns the check off, and a check sympy cannot decide in bounds pays.",
         choice="Refuse (FN against a lenient grader): factoring completely is the task, and a partial "
                "factorisation is cheaper to produce.",
         source="MATH (factored answers are complete over the integers); OpenCompass pays any equal value",
         examples=[("Factor $28z^{97}+7z^{96}$.", "z^{96}(28z+7)", "7z^{96}(4z+1)", False),
                   ("Factor $36-4x^2$ completely.", "4(9-x^2)", "4(3-x)(3+x)", False),
                   ("Factor $36-4x^2$ completely.", "(6-2x)(6+2x)", "4(3-x)(3+x)", False),
                   ("Factor $36-4x^2$ completely.", "-4(x-3)(x+3)", "4(3-x)(3+x)", True),
                   ("Factor $2x^2+4x+2$.", "2(x+1)^2", "2(x+1)(x+1)", True),
                   ("Factor $x^2-2$ over the reals.", "(x+\\sqrt{2})(x-\\sqrt{2})", "(x-\\sqrt2)(x+\\sqrt2)", True)]),
    dict(rule="huge exact expressions", when="always",
         decision="An answer the bounded-time guards refuse (a power tower deeper than a^{b^c}, a value beyond "
                  "10^20000, a factorial above 10000!) is not paid even when it equals the gold; an answer "
                  "identical to the gold after normalisation always is.",
         choice="Refuse (an FN by construction): every call stays well under 1 s, and an unsimplified giant "
                "(n - n + 5 with n = 2^{2^{30}}) does none of the work.",
         source="this recipe's bounded-time rule; MATH's golds never need it; OpenCompass times out (no score)",
         examples=[("", "2^{2^{30}} - 2^{2^{30}} + 5", "5", False),
                   ("", "\\frac{7^{7^{9}} \\cdot 3}{7^{7^{9}}}", "3", False),
                   ("", "\\prod_{k=1}^{99} \\frac{k+1}{k}", "100", False), ("", "2^{10}", "1024", True)]),
    dict(rule="units, labels, relations", when="always",
         decision="Units are optional (another unit is another answer, and so is a unit of measure the question does "
                  "not ask for when it asks for one: \"in dollars\", \"how many seconds\", or a unit of a kind the "
                  "question names only in other units: days, hours, years are time, and `41 \\text{ days}` "
                  "answers no question that speaks of years only); a label, `x \\in`, "
                  "`x \\approx`, `\\equiv ... \\pmod{n}` or a one-symbol name before the answer states it (`r =`, "
                  "`E =`, `\\Delta =`: any letter but the constants e and i, any Greek letter but \\pi; the name is "
                  "not checked against the one the question uses, the value is graded); a word in the box before "
                  "the value states it when it is the noun the question asks for (\"what base\", \"find the "
                  "positive base\"); a chain of "
                  "constant sides (`\\binom{5}{4}\\binom{10}{8} = 225`) states its last side when every side has "
                  "its value, and a false numeric side is refused. Words after a value that bound or hedge it (`6 "
                  "\\text{ or fewer}`, `\\text{ at most}`) are no unit: the answer is refused.",
         choice="Pay (MATH's graders drop units and labels); a different unit or modulus is refused, also a "
                "modulus other than those the question names (\"mod 7\", \"divided by 6\") and their least "
                "common multiples.",
         source="MATH (its grader strips units and \"\\text{ }\" labels); OpenCompass likewise",
         examples=[("", "r = 3 \\text{ units}", "3", True), ("", "10\\ \\mathrm{in}", "10\\text{ inches}", True),
                   ("", "x \\equiv 8 \\pmod{13}", "8", True), ("", "\\lambda \\in (3,4]", "(3,4]", True),
                   ("", "10\\text{ cm}", "10\\text{ m}", False), ("", "21 \\pmod{13}", "8", False),
                   ("In what base does $44 \\times 55 = 3506$?", "\\text{base } 7", "7", True),
                   ("Find the positive base $b$ in which $5_b \\cdot 23_b = 151_b$.", "\\text{base } 7", "7", True),
                   ("What is $44 \\times 55$ in base 10?", "\\text{base } 7", "7", False),
                   ("Solve $3n \\equiv 2 \\pmod{11}$.", "n \\equiv 8 \\pmod{13}", "8", False),
                   ("Solve $3n \\equiv 2 \\pmod{11}$.", "n \\equiv 8 \\pmod{11}", "8", True),
                   ("How much, in dollars, will 10 oranges cost?", "2.50 \\text{ cents}", "\\$2.50", False),
                   ("What is the height in centimeters?", "5 \\text{ m}", "5", False),
                   ("What is the height in centimeters?", "5 \\text{ centimeters}", "5", True),
                   ("Their ages differ by 27 years. What is the number of years in his age?", "41 \\text{ days}",
                    "41", False),
                   ("Their ages differ by 27 years. What is the number of years in his age?", "41 \\text{ years}",
                    "41", True),
                   ("", "\\binom{5}{4}\\binom{10}{8} = 225", "225", True),
                   ("", "\\binom{5}{4}\\binom{10}{8} = 50", "50", False),
                   ("What digit is $\\Delta$?", "\\Delta = 8", "8", True), ("", "E = 4", "4", True),
                   ("", "\\pi = 3", "3", False),
                   ("Find the number of ordered triples.", "6 \\text{ or fewer}", "6", False),
                   ("If $3^i\\equiv 5\\pmod 7$, what is the remainder when $i^2$ is divided by $6$?", "1 \\pmod{6}",
                    "1", True)]),
    dict(rule="labelled values", when="the answer names each value (`x = -1, y = 6`, `n_1 = 19, n_2 = 22`)",
         decision="Values labelled with distinct names state the tuple of the values in the order of their names: "
                  "the order of the tuple of those names the question states (\"Enter the ordered triple "
                  "$(p,q,r)$\"), else alphabetical; they answer an ordered pair or triple and a list of those values "
                  "in that order; one name repeated (`x = 9, x = -7`) lists its values.",
         choice="Pay: the names say which value is which, and the order of the names is the pair's order.",
         source="MATH (its grader strips labels); OpenCompass pays the values",
         examples=[("Express your answer as an ordered pair.", "x=-1, y=6", "(-1,6)", True),
                   ("Express your answer as an ordered pair.", "y = 6, x = -1", "(-1,6)", True),
                   ("Express your answer as an ordered pair.", "x = 6, y = -1", "(-1,6)", False),
                   ("", "n_1 = 19, n_2 = 22", "19, 22", True), ("", "x = 9, x = -7", "9,-7", True),
                   ("Enter the ordered triple $(p,q,r)$.", "p = 6, q = 31, r = -1", "(6,31,-1)", True),
                   ("Enter the ordered pair $(b,a)$.", "a = 2, b = 1", "(1,2)", True),
                   ("Enter the ordered triple $(p,q,r)$.", "q = 6, p = 31, r = -1", "(6,31,-1)", False)]),
    dict(rule="renamed function variable", when="the answer defines a function, `NAME(v) = expression` (also an "
                                                 "inverse, `NAME^{-1}(v) = expression`)",
         decision="The variable the label binds is a placeholder: `f(t) = t^2 - 7t + 12` states x^2 - 7x + 12 when "
                  "t is the expression's one variable and the gold's one variable is x. A bare expression in "
                  "another variable binds nothing and is another expression.",
         choice="Pay: the same function; the label is what makes the renaming safe.",
         source="MATH (a function's formula); OpenCompass compares the expressions as written",
         examples=[("", "f(t) = t^2 - 7t + 12", "x^2 - 7x + 12", True),
                   ("", "k(u) = 3 - \\sqrt{u - 3}", "-\\sqrt{x-3}+3", True),
                   ("", "3 - \\sqrt{t-3}", "-\\sqrt{x-3}+3", False),
                   ("", "f(t) = x^2 - 7t + 12", "x^2 - 7x + 12", False),
                   ("", "h^{-1}(y) = \\frac{y+2}{7}", "\\frac{x+2}{7}", True)]),
    dict(rule="zero vector, identity matrix", when="the gold or the answer is a vector or matrix",
         decision="The zero vector in bold or with an arrow (\\mathbf{0}, \\vec{0}, \\boldsymbol{0}) is a vector "
                  "or matrix whose entries are all 0; the number 0 is no vector, nor the zero vector a number. A "
                  "bold I with an integer factor (`-\\mathbf{I}`) is that multiple of the identity of the gold "
                  "matrix's size.",
         choice="Pay the notation (the same object); refuse a type change (a scalar for a vector).",
         source="MATH (vector answers); OpenCompass reads \\mathbf{0} as the number 0",
         examples=[("", "\\mathbf{0}", "\\begin{pmatrix} 0 \\\\ 0 \\\\ 0 \\end{pmatrix}", True),
                   ("", "\\vec 0", "\\begin{pmatrix} 0 & 0 \\\\ 0 & 0 \\end{pmatrix}", True),
                   ("", "0", "\\begin{pmatrix} 0 \\\\ 0 \\\\ 0 \\end{pmatrix}", False),
                   ("", "\\mathbf{0}", "\\begin{pmatrix} 0 \\\\ 1 \\end{pmatrix}", False),
                   ("", "-\\mathbf{I}", "\\begin{pmatrix} -1 & 0 \\\\ 0 & -1 \\end{pmatrix}", True),
                   ("", "\\mathbf{I}", "\\begin{pmatrix} -1 & 0 \\\\ 0 & -1 \\end{pmatrix}", False)]),
    dict(rule="number words, base subscripts", when="always",
         decision="A cardinal in words is its number (with or without a unit word); a base subscript is "
                  "optional in any brace style, another base is another answer.",
         choice="Pay: the same value, written otherwise.",
         source="MATH (the answer's value); OpenCompass reads neither words nor subscripts",
         examples=[("", "\\text{five digits}", "5", True), ("", "twenty-one", "21", True),
                   ("", "\\text{one of them}", "1", False),
                   ("", "1011_2", "1011_{2}", True), ("", "1011_{3}", "1011_2", False)]),
    dict(rule="multiple choice", when="the gold is an option letter, or the question lists options",
         decision="The letter in any case or bracket ((e), \\text{(E)}, E); with the options in the question "
                  "(labels \"(A)\", \"A.\" or \"A)\" opening a line, or letters given a meaning: 'Enter \"C\" for "
                  "circle'), the chosen option's value for its letter, the letter for its value, and a block of "
                  "option letters in any separation (\"A, C, F\" for \"ACF\" and \"ACF\" for \"A,C,F\", in the "
                  "order given); a letter followed by a description (\"A: rises, then stays constant\") is that letter "
                  "unless the description names another option. Values the question names with letters (\"$A=\\sqrt{2}, B=\\sqrt[4]{4}, "
                  "C=\\sqrt[8]{8}$\") are options only when the gold is one of those letters and the question "
                  "does not demand the letter (\"Enter your answer as $A$, $B$, or $C$\"): the named value answers "
                  "for its letter, not the letter for the value (such names are often points or sets).",
         choice="Pay exactly one option: a value shared by two options, another option's value, or a letter written "
                "with another option's value (\"(B) 2/3\" when (B) is 1/2) is refused. An option that is a task in "
                "words (\"14.45001 rounded to the nearest tenth\") is not compared: its letter is the answer, "
                "with or without the value computed.",
         source="MATH (AMC-style answers are letters); OpenCompass compares letters as text",
         examples=[("", "\\text{(e)}", "\\text{(E)}", True), ("", "(D)", "\\text{(E)}", False),
                   ("Which? $\\textbf{(A)}\\ 2 \\qquad\\textbf{(B)}\\ 3 \\qquad\\textbf{(C)}\\ 7 \\qquad"
                    "\\textbf{(D)}\\ 4 \\qquad\\textbf{(E)}\\ 5$", "7", "\\text{(C)}", True),
                   ("Which? $\\textbf{(A)}\\ 2 \\qquad\\textbf{(B)}\\ 3 \\qquad\\textbf{(C)}\\ 7 \\qquad"
                    "\\textbf{(D)}\\ 4 \\qquad\\textbf{(E)}\\ 5$", "4", "\\text{(C)}", False),
                   ("Which round to 40?\nA. $43$\nB. $23$\nC. $38$\nAnswer as a block of letters.", "A, C",
                    "\\text{AC}", True),
                   ("Which round to 40?\nA. $43$\nB. $23$\nC. $38$\nEnter the letters, separated by commas.", "AC",
                    "\\text{A,C}", True),
                   ("Which is least? $A=\\sqrt{2}, B=\\sqrt[4]{4}, C=\\sqrt[8]{8}$.", "\\sqrt[8]{8}", "C", True),
                   ("Which is least? $A=\\sqrt{2}, B=\\sqrt[4]{4}, C=\\sqrt[8]{8}$. Enter your answer as $A$, $B$, or $C$.",
                    "\\sqrt[8]{8}", "C", False),
                   ("Which is smallest?\nA. $14.45001$ rounded to the nearest tenth.\nB. $14.54999$ rounded to the "
                    "nearest tenth.\nC. $14.44999$ rounded to the nearest tenth.", "(C)\\ 14.4", "\\text{C}", True),
                   ("Which is smallest?\nA. $14.45001$ rounded to the nearest tenth.\nB. $14.54999$ rounded to the "
                    "nearest tenth.\nC. $14.44999$ rounded to the nearest tenth.", "(A)\\ 14.4", "\\text{C}", False)]),
    dict(rule="one final answer", when="always",
         decision="The final answer is the one in a final \\boxed{} (or \\fbox{}), as the answer contract asks: a "
                  "response without one is not paid, whatever it states in words (\"The final answer is 18\"). "
                  "Several different boxed answers offered as alternatives, cycled candidates, a truncated or "
                  "placeholder box and a hallucinated follow-up problem are not paid; nor is an answer with an "
                  "empty or placeholder box beside it (`\\boxed{}\\boxed{108}`, one such box is enough; an empty "
                  "box in a sentence, \"put it in \\boxed{}.\", is text), nor one followed after `</answer>` by "
                  "a box of another value (a box of the same value there is a restatement), nor one followed by an "
                  "unboxed final statement of another value (\"So the answer is 11.\").",
         choice="Refuse: hedging is the cheapest hack to farm; an answer in words alone is not the contract's.",
         source="this recipe's hack defence (new_math_reward.py section 2); OpenCompass reads the last box only",
         examples=[("", "3 \\text{ or } 4", "4", False)]),
)


def policy_markdown() -> str:
    """POLICY_RULES as the markdown table of docs/reward_policy.md (python -m maintenance.sync_readme)."""
    def cell(text: str) -> str:
        return text.replace("|", "\\|").replace("\n", " ")

    lines = ["| rule | applies when | decision | FN / FP choice | source |", "|---|---|---|---|---|"]
    lines += [f"| {cell(r['rule'])} | {cell(r['when'])} | {cell(r['decision'])} | {cell(r['choice'])} | "
              f"{cell(r['source'])} |" for r in POLICY_RULES]
    return "\n".join(lines)

